package org.mtpedge.engine.drafters;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.Comparator;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

import org.mtpedge.engine.DraftTree;

/**
 * Pure functions that build draft trees; line-by-line port of {@code mtpedge.runtime.tree_build}.
 *
 * <p>Token nodes come as (tokens, parents) with the root at index 0 and parents before children (BFS order);
 * {@link #attachMaskSlots} appends ESP's k mask slots after every token node:
 * {@code [root | tree nodes (BFS) | k masks after root | k masks after node 1 | ...]}. Ties are broken
 * deterministically everywhere: higher probability first, then the lower token id.
 */
public final class TreeBuild {
    private TreeBuild() {
    }

    /** Token nodes of a tree or a candidate pool: tokens, parents and (for pools) scores. */
    public static final class Pool {
        public final int[] tokens;
        public final int[] parents;
        public final double[] scores;

        public Pool(int[] tokens, int[] parents, double[] scores) {
            this.tokens = tokens;
            this.parents = parents;
            this.scores = scores;
        }

        public int size() {
            return tokens.length;
        }
    }

    /** The {@code count} best token ids of {@code values} (best first, ties by lower id), skipping {@code exclude}. */
    public static int[] topTokens(double[] values, int count, int exclude) {
        if (count <= 0) {
            return new int[0];
        }
        int take = Math.min(count + 1, values.length);
        int[] best = new int[take]; // kept sorted: higher value first, then lower id
        int size = 0;
        for (int id = 0; id < values.length; id++) {
            double v = values[id];
            if (size == take && !(v > values[best[size - 1]])) {
                continue; // ids rise, so an equal value loses to the ids already kept
            }
            int at = size == take ? size - 1 : size++;
            while (at > 0 && v > values[best[at - 1]]) {
                best[at] = best[at - 1];
                at--;
            }
            best[at] = id;
        }
        int[] out = new int[Math.min(count, size)];
        int k = 0;
        for (int i = 0; i < size && k < out.length; i++) {
            if (best[i] != exclude) {
                out[k++] = best[i];
            }
        }
        return Arrays.copyOf(out, k);
    }

    public static double[] toDouble(float[] row) {
        double[] out = new double[row.length];
        for (int i = 0; i < row.length; i++) {
            out[i] = row[i];
        }
        return out;
    }

    /** Row-wise softmax in double. */
    public static double[] softmax(float[] logits) {
        double max = Double.NEGATIVE_INFINITY;
        for (float v : logits) {
            max = Math.max(max, v);
        }
        double[] p = new double[logits.length];
        double sum = 0;
        for (int i = 0; i < p.length; i++) {
            p[i] = Math.exp((double) logits[i] - max);
            sum += p[i];
        }
        for (int i = 0; i < p.length; i++) {
            p[i] /= sum;
        }
        return p;
    }

    /**
     * ESP's static tree with "top-1 expansion": depth i holds the top widths[i-1] tokens of mask i, all children
     * of the most probable node of depth i-1 (the root for depth 1). {@code maskScores}: logits or probabilities.
     */
    public static Pool staticTree(int root, double[][] maskScores, int[] widths) {
        if (widths.length > maskScores.length) {
            throw new IllegalArgumentException(widths.length + " tree depths need as many mask distributions, got "
                    + maskScores.length);
        }
        int total = 1;
        for (int w : widths) {
            total += w;
        }
        int[] tokens = new int[total];
        int[] parents = new int[total];
        tokens[0] = root;
        parents[0] = -1;
        int anchor = 0;
        int anchorToken = root;
        int size = 1;
        for (int depth = 0; depth < widths.length; depth++) {
            int[] chosen = topTokens(maskScores[depth], widths[depth], anchorToken);
            if (chosen.length < widths[depth]) {
                throw new IllegalArgumentException("the vocabulary is too small for a tree width of " + widths[depth]);
            }
            for (int i = 0; i < chosen.length; i++) {
                tokens[size + i] = chosen[i];
                parents[size + i] = anchor;
            }
            anchor = size;
            anchorToken = chosen[0];
            size += chosen.length;
        }
        return new Pool(tokens, parents, null);
    }

    /** Per-depth widths filling {@code nodes} token nodes (root included): most at depth 1, as ESP's [15, 4]. */
    public static int[] defaultStaticWidths(int nodes, int k) {
        int drafts = nodes - 1;
        if (drafts < 1) {
            return new int[0];
        }
        int deeper = drafts >= k ? Math.max(1, drafts / 4) : 0;
        List<Integer> widths = new ArrayList<>();
        widths.add(drafts - deeper * (k - 1));
        for (int i = 0; i < k - 1; i++) {
            widths.add(deeper);
        }
        return widths.stream().filter(w -> w > 0).mapToInt(Integer::intValue).toArray();
    }

    /**
     * Candidates of ESP's dynamic tree: depth i offers the top (offer - i) tokens of mask i under the top-1
     * candidate of depth i-1, each scored P(parent) * p_i(token). Root at index 0 with score 1.
     */
    public static Pool maskPool(double[][] maskProbs, int offer, int root) {
        List<Integer> tokens = new ArrayList<>(Arrays.asList(root));
        List<Integer> parents = new ArrayList<>(Arrays.asList(-1));
        List<Double> scores = new ArrayList<>(Arrays.asList(1.0));
        int anchor = 0;
        int anchorToken = root;
        double anchorScore = 1.0;
        for (int depth = 0; depth < maskProbs.length; depth++) {
            int count = offer - depth;
            if (count <= 0) {
                break;
            }
            int[] chosen = topTokens(maskProbs[depth], count, anchorToken);
            int first = tokens.size();
            for (int t : chosen) {
                tokens.add(t);
                parents.add(anchor);
                scores.add(anchorScore * maskProbs[depth][t]);
            }
            anchor = first;
            anchorToken = chosen[0];
            anchorScore = scores.get(first);
        }
        return new Pool(ints(tokens), ints(parents), scores.stream().mapToDouble(Double::doubleValue).toArray());
    }

    /** A pool of token chains hanging under the root (e.g. n-gram continuations), with per-node scores. */
    public static Pool chainPool(int root, List<int[]> continuations, List<double[]> scores) {
        List<Integer> tokens = new ArrayList<>(Arrays.asList(root));
        List<Integer> parents = new ArrayList<>(Arrays.asList(-1));
        List<Double> poolScores = new ArrayList<>(Arrays.asList(1.0));
        for (int c = 0; c < continuations.size(); c++) {
            int[] chain = continuations.get(c);
            double[] chainScores = scores.get(c);
            if (chain.length != chainScores.length) {
                throw new IllegalArgumentException("a chain of " + chain.length + " tokens has " + chainScores.length
                        + " scores");
            }
            int parent = 0;
            for (int i = 0; i < chain.length; i++) {
                tokens.add(chain[i]);
                parents.add(parent);
                poolScores.add(chainScores[i]);
                parent = tokens.size() - 1;
            }
        }
        return new Pool(ints(tokens), ints(parents), poolScores.stream().mapToDouble(Double::doubleValue).toArray());
    }

    /** One pool from several pools sharing the root (index 0 of each); later roots are dropped. */
    public static Pool concatPools(Pool... pools) {
        int total = 1;
        for (Pool p : pools) {
            total += p.size() - 1;
        }
        int[] tokens = new int[total];
        int[] parents = new int[total];
        double[] scores = new double[total];
        tokens[0] = pools[0].tokens[0];
        parents[0] = pools[0].parents[0];
        scores[0] = pools[0].scores[0];
        int size = 1;
        for (Pool p : pools) {
            for (int i = 1; i < p.size(); i++) {
                tokens[size + i - 1] = p.tokens[i];
                parents[size + i - 1] = p.parents[i] == 0 ? 0 : p.parents[i] + size - 1;
                scores[size + i - 1] = p.scores[i];
            }
            size += p.size() - 1;
        }
        return new Pool(tokens, parents, scores);
    }

    /** A selected tree: token nodes, the pool index each came from, and its score after merging and capping. */
    public static final class Selection {
        public final int[] tokens;
        public final int[] parents;
        public final int[] chosen;
        public final double[] scores;

        Selection(int[] tokens, int[] parents, int[] chosen, double[] scores) {
            this.tokens = tokens;
            this.parents = parents;
            this.chosen = chosen;
            this.scores = scores;
        }

        /** The candidates' scores (the root's left out): what a tree sizer weighs. */
        public double[] candidateScores() {
            return Arrays.copyOfRange(scores, 1, scores.length);
        }
    }

    /**
     * The best tree of at most {@code budget} nodes (root included) from a candidate pool. Pool nodes repeating a
     * sibling's token are merged (higher score kept); a node's score is capped by its parent's, so the best scores
     * always form a connected tree. Ties go to the shallower node, then the earlier pool entry. The result holds
     * the best chain first (the root, then each node's best-scored child), then the other nodes in BFS order
     * (depth, then score rank): a graph call computes a block's leading chain bit for bit as plain decoding does
     * (graph contract v2), so the likeliest path is the one verified exactly.
     */
    public static Selection selectTree(Pool pool, int budget) {
        if (budget < 1) {
            throw new IllegalArgumentException("a tree budget must be >= 1, got " + budget);
        }
        int n = pool.size();
        int[] merged = new int[n];
        int[] depth = new int[n];
        double[] score = pool.scores.clone();
        Map<Long, Integer> seen = new HashMap<>();
        for (int i = 1; i < n; i++) {
            int parent = merged[pool.parents[i]];
            depth[i] = depth[parent] + 1;
            score[i] = Math.min(score[i], score[parent]);
            long key = ((long) parent << 32) | (pool.tokens[i] & 0xffffffffL);
            Integer keep = seen.get(key);
            if (keep != null) {
                score[keep] = Math.max(score[keep], score[i]);
                merged[i] = keep;
            } else {
                seen.put(key, i);
                merged[i] = i;
            }
        }
        List<Integer> reps = new ArrayList<>();
        for (int i = 1; i < n; i++) {
            if (merged[i] == i) {
                reps.add(i);
            }
        }
        reps.sort(Comparator.<Integer>comparingDouble(i -> -score[i]).thenComparingInt(i -> depth[i])
                .thenComparingInt(i -> i));
        List<Integer> order = new ArrayList<>(reps.subList(0, Math.min(budget - 1, reps.size())));
        List<Integer> ranked = new ArrayList<>(order);
        order.sort(Comparator.<Integer>comparingInt(i -> depth[i]).thenComparingInt(ranked::indexOf)); // BFS
        List<Integer> chain = new ArrayList<>();
        chain.add(0);
        while (true) { // BFS order lists each node's children best first
            int last = chain.get(chain.size() - 1);
            Integer child = null;
            for (int c : order) {
                if (merged[pool.parents[c]] == last) {
                    child = c;
                    break;
                }
            }
            if (child == null) {
                break;
            }
            chain.add(child);
        }
        int[] chosen = new int[order.size() + 1];
        int next = 0;
        for (int c : chain) {
            chosen[next++] = c;
        }
        for (int c : order) {
            if (!chain.contains(c)) {
                chosen[next++] = c;
            }
        }
        Map<Integer, Integer> newIndex = new HashMap<>();
        for (int i = 0; i < chosen.length; i++) {
            newIndex.put(chosen[i], i);
        }
        int[] tokens = new int[chosen.length];
        int[] parents = new int[chosen.length];
        double[] chosenScores = new double[chosen.length];
        parents[0] = -1;
        for (int i = 0; i < chosen.length; i++) {
            tokens[i] = pool.tokens[chosen[i]];
            chosenScores[i] = score[chosen[i]];
            if (i > 0) {
                Integer p = newIndex.get(merged[pool.parents[chosen[i]]]);
                if (p == null) {
                    throw new IllegalStateException("selected node " + chosen[i] + " lost its parent");
                }
                parents[i] = p;
            }
        }
        return new Selection(tokens, parents, chosen, chosenScores);
    }

    /** The tree plus a chain of k SLOT nodes under every token node; slot j of owner b is at n + b * k + j. */
    public static DraftTree attachMaskSlots(int[] tokens, int[] parents, int k) {
        return attachMaskSlots(tokens, parents, k, null);
    }

    /**
     * The tree plus a chain of k SLOT nodes under every token node in {@code owners} (null: all of them); slot j
     * of the r-th owner sits at n + r * k + j.
     */
    public static DraftTree attachMaskSlots(int[] tokens, int[] parents, int k, int[] owners) {
        int n = tokens.length;
        int count = owners == null ? n : owners.length;
        int[] allTokens = Arrays.copyOf(tokens, n + count * k);
        int[] allParents = Arrays.copyOf(parents, n + count * k);
        for (int r = 0; r < count; r++) {
            int owner = owners == null ? r : owners[r];
            for (int j = 0; j < k; j++) {
                int index = n + r * k + j;
                allTokens[index] = DraftTree.SLOT;
                allParents[index] = j == 0 ? owner : index - 1;
            }
        }
        return new DraftTree(allTokens, allParents);
    }

    /** Index of the first of the k mask slots of token node {@code owner}. */
    public static int maskSlotStart(int nTokens, int owner, int k) {
        return nTokens + owner * k;
    }

    /** Index of the first of the k mask slots of token node {@code owner} among {@code owners}; -1 if it has none. */
    public static int maskSlotStart(int nTokens, int owner, int k, int[] owners) {
        for (int r = 0; r < owners.length; r++) {
            if (owners[r] == owner) {
                return nTokens + r * k;
            }
        }
        return -1;
    }

    /** Each parent's best next tokens and their probabilities, (m, b) each: one step of {@link #expansionPool}. */
    public static final class Expansion {
        public final int[][] tokens;
        public final double[][] probs;

        public Expansion(int[][] tokens, double[][] probs) {
            this.tokens = tokens;
            this.probs = probs;
        }
    }

    /** The drafter's next-token step: the best next tokens after each of {@code parentTokens} at mask {@code depth}. */
    public interface Expand {
        Expansion apply(int depth, int[] parentTokens);
    }

    /**
     * A candidate pool grown depth by depth from the root: a child scores its parent's score times its
     * probability, and the {@code keep} best children of a depth (ties: earlier parent, then better rank) become
     * the next depth's parents. Root at index 0 with score 1.
     */
    public static Pool expansionPool(int root, Expand expand, int depths, int keep) {
        List<Integer> tokens = new ArrayList<>(Arrays.asList(root));
        List<Integer> parents = new ArrayList<>(Arrays.asList(-1));
        List<Double> scores = new ArrayList<>(Arrays.asList(1.0));
        int[] frontier = {0};
        for (int depth = 0; depth < depths; depth++) {
            int[] parentTokens = new int[frontier.length];
            for (int i = 0; i < frontier.length; i++) {
                parentTokens[i] = tokens.get(frontier[i]);
            }
            Expansion children = expand.apply(depth, parentTokens);
            int width = children.tokens.length == 0 ? 0 : children.tokens[0].length;
            double[] childScores = new double[frontier.length * width];
            Integer[] order = new Integer[childScores.length];
            for (int m = 0; m < frontier.length; m++) {
                for (int b = 0; b < width; b++) {
                    childScores[m * width + b] = scores.get(frontier[m]) * children.probs[m][b];
                    order[m * width + b] = m * width + b;
                }
            }
            Arrays.sort(order, (a, b) -> Double.compare(childScores[b], childScores[a])); // stable: ties keep order
            int size = tokens.size();
            int kept = Math.min(keep, order.length);
            int[] previous = frontier;
            frontier = new int[kept];
            for (int i = 0; i < kept; i++) {
                int flat = order[i];
                tokens.add(children.tokens[flat / width][flat % width]);
                parents.add(previous[flat / width]);
                scores.add(childScores[flat]);
                frontier[i] = size + i;
            }
        }
        return new Pool(ints(tokens), ints(parents), scores.stream().mapToDouble(Double::doubleValue).toArray());
    }

    /** Depth of each node of a parents array in BFS order (parents before children). */
    static int[] depths(int[] parents) {
        int[] depth = new int[parents.length];
        for (int i = 1; i < parents.length; i++) {
            depth[i] = depth[parents[i]] + 1;
        }
        return depth;
    }

    /** Kept nodes (indices into the tree, ascending) and the mask owners among them (indices into the kept). */
    public static final class Owners {
        public final int[] kept;
        public final int[] owners;

        Owners(int[] kept, int[] owners) {
            this.kept = kept;
            this.owners = owners;
        }
    }

    /**
     * Split a slot budget between draft tokens and mask slots by expected value: keeping the n best nodes is
     * worth the sum of their scores; k mask slots under node i are worth gain * P(i is the deepest accepted node)
     * ~ gain * (s_i - its kept children's s). Every n from 1 up is tried; the remaining width goes to the owners
     * of highest P(deepest). {@code parents}/{@code scores}: a tree from {@link #selectTree} (BFS, capped scores).
     */
    public static Owners maskOwnersByValue(int[] parents, double[] scores, int width, int k, double gain) {
        int size = parents.length;
        int[] depth = depths(parents);
        Integer[] rank = new Integer[size]; // parents before children (scores are capped)
        for (int i = 0; i < size; i++) {
            rank[i] = i;
        }
        Arrays.sort(rank, descending(i -> scores[i]).thenComparingInt(i -> depth[i]).thenComparingInt(i -> i));
        double[] deepest = new double[size];
        double bestValue = -1.0;
        int bestN = 1;
        Integer[] bestOwners = new Integer[0];
        double total = 0.0;
        for (int n = 1; n <= Math.min(width, size); n++) {
            int node = rank[n - 1];
            total += scores[node];
            deepest[node] = scores[node];
            if (node != 0) {
                deepest[parents[node]] -= scores[node];
            }
            int room = k == 0 ? 0 : Math.min(n, Math.floorDiv(width - n, k));
            if (room < 0) {
                throw new IllegalArgumentException("a tree of " + n + " nodes leaves no room in " + width + " slots");
            }
            // rounded: equal probabilities reached by different sums must tie (then the lower index wins)
            Integer[] kept = Arrays.copyOf(rank, n);
            Arrays.sort(kept, descending(i -> Math.rint(deepest[i] * 1e12) / 1e12).thenComparingInt(i -> i));
            Integer[] owners = Arrays.copyOf(kept, Math.min(room, n));
            double[] worth = new double[owners.length];
            for (int i = 0; i < owners.length; i++) {
                worth[i] = Math.max(0.0, deepest[owners[i]]);
            }
            double value = total + gain * org.mtpedge.engine.NumpySum.sum(worth);
            if (value > bestValue + 1e-12) {
                bestValue = value;
                bestN = n;
                bestOwners = owners;
            }
        }
        int[] kept = new int[bestN];
        for (int i = 0; i < bestN; i++) {
            kept[i] = rank[i];
        }
        Arrays.sort(kept);
        int[] owners = new int[bestOwners.length];
        for (int i = 0; i < owners.length; i++) {
            owners[i] = Arrays.binarySearch(kept, bestOwners[i]);
        }
        Arrays.sort(owners);
        return new Owners(kept, owners);
    }

    /** A tree for {@code width} slots whose k-mask owners are chosen by value; see {@link #maskOwnersByValue}. */
    public static final class OwnedTree {
        public final int[] tokens;
        public final int[] parents;
        /** Pool index of each node. */
        public final int[] chosen;
        /** Indices of the nodes that carry k mask slots, ascending. */
        public final int[] owners;

        OwnedTree(int[] tokens, int[] parents, int[] chosen, int[] owners) {
            this.tokens = tokens;
            this.parents = parents;
            this.chosen = chosen;
            this.owners = owners;
        }
    }

    /** {@link #selectTree} (at most width - k nodes), then {@link #maskOwnersByValue} and the kept subtree. */
    public static OwnedTree selectTreeWithOwners(Pool pool, int width, int k, double gain) {
        Selection tree = selectTree(pool, width - k);
        Owners split = maskOwnersByValue(tree.parents, tree.scores, width, k, gain);
        int[] newIndex = new int[tree.parents.length];
        Arrays.fill(newIndex, -1);
        for (int i = 0; i < split.kept.length; i++) {
            newIndex[split.kept[i]] = i;
        }
        int[] tokens = new int[split.kept.length];
        int[] parents = new int[split.kept.length];
        int[] chosen = new int[split.kept.length];
        for (int i = 0; i < split.kept.length; i++) {
            int node = split.kept[i];
            tokens[i] = tree.tokens[node];
            parents[i] = tree.parents[node] < 0 ? -1 : newIndex[tree.parents[node]];
            chosen[i] = tree.chosen[node];
        }
        return new OwnedTree(tokens, parents, chosen, split.owners);
    }

    /** Higher value first, with 0.0 and -0.0 equal (as numpy's sorts; Double.compare would order them). */
    private static Comparator<Integer> descending(java.util.function.IntToDoubleFunction value) {
        return (a, b) -> {
            double x = value.applyAsDouble(a);
            double y = value.applyAsDouble(b);
            return x > y ? -1 : x < y ? 1 : 0;
        };
    }

    static int[] ints(List<Integer> list) {
        return list.stream().mapToInt(Integer::intValue).toArray();
    }
}

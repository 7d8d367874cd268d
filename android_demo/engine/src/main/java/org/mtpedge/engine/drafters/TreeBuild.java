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

    /** A selected tree: token nodes and the pool index each came from. */
    public static final class Selection {
        public final int[] tokens;
        public final int[] parents;
        public final int[] chosen;

        Selection(int[] tokens, int[] parents, int[] chosen) {
            this.tokens = tokens;
            this.parents = parents;
            this.chosen = chosen;
        }
    }

    /**
     * The best tree of at most {@code budget} nodes (root included) from a candidate pool. Pool nodes repeating a
     * sibling's token are merged (higher score kept); a node's score is capped by its parent's, so the best scores
     * always form a connected tree. Ties go to the shallower node, then the earlier pool entry. BFS order result.
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
        order.sort(Comparator.<Integer>comparingInt(i -> depth[i]).thenComparingInt(ranked::indexOf));
        int[] chosen = new int[order.size() + 1];
        for (int i = 0; i < order.size(); i++) {
            chosen[i + 1] = order.get(i);
        }
        Map<Integer, Integer> newIndex = new HashMap<>();
        for (int i = 0; i < chosen.length; i++) {
            newIndex.put(chosen[i], i);
        }
        int[] tokens = new int[chosen.length];
        int[] parents = new int[chosen.length];
        parents[0] = -1;
        for (int i = 0; i < chosen.length; i++) {
            tokens[i] = pool.tokens[chosen[i]];
            if (i > 0) {
                Integer p = newIndex.get(merged[pool.parents[chosen[i]]]);
                if (p == null) {
                    throw new IllegalStateException("selected node " + chosen[i] + " lost its parent");
                }
                parents[i] = p;
            }
        }
        return new Selection(tokens, parents, chosen);
    }

    /** The tree plus a chain of k SLOT nodes under every token node; slot j of owner b is at n + b * k + j. */
    public static DraftTree attachMaskSlots(int[] tokens, int[] parents, int k) {
        int n = tokens.length;
        int[] allTokens = Arrays.copyOf(tokens, n + n * k);
        int[] allParents = Arrays.copyOf(parents, n + n * k);
        for (int b = 0; b < n; b++) {
            for (int j = 0; j < k; j++) {
                int index = n + b * k + j;
                allTokens[index] = DraftTree.SLOT;
                allParents[index] = j == 0 ? b : index - 1;
            }
        }
        return new DraftTree(allTokens, allParents);
    }

    /** Index of the first of the k mask slots of token node {@code owner}. */
    public static int maskSlotStart(int nTokens, int owner, int k) {
        return nTokens + owner * k;
    }

    static int[] ints(List<Integer> list) {
        return list.stream().mapToInt(Integer::intValue).toArray();
    }
}

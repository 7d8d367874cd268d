package org.mtpedge.engine;

import java.util.Arrays;

/**
 * How big a draft tree pays: the candidates to keep and the graph width to call, for the most expected tokens per
 * second; port of {@code mtpedge.runtime.tree_sizing.size_tree}.
 *
 * <p>A step commits 1 + (the kept candidates' acceptance probabilities) tokens in expectation and costs
 * cost(narrowest width holding its slots) + host seconds; keeping the n most probable candidates is the best tree of
 * n nodes, so n is searched exhaustively. On a flat table the tree grows to the widest graph; where a wide call
 * costs several narrow ones it shrinks to what its candidates' probabilities pay for.
 */
public final class TreeSizing {
    private TreeSizing() {
    }

    /** Host seconds of one step beside the graph call. */
    public static final class HostCost {
        public final double fixed;
        public final double perSlot;

        public HostCost(double fixed, double perSlot) {
            this.fixed = fixed;
            this.perSlot = perSlot;
        }

        public double seconds(int slots) {
            return fixed + perSlot * slots;
        }
    }

    /** The chosen size: candidates kept (root not counted), slots filled, width called, expected tokens, seconds. */
    public static final class TreeSize {
        public final int candidates;
        public final int slots;
        public final int width;
        public final double expectedTokens;
        public final double seconds;

        TreeSize(int candidates, int slots, int width, double expectedTokens, double seconds) {
            this.candidates = candidates;
            this.slots = slots;
            this.width = width;
            this.expectedTokens = expectedTokens;
            this.seconds = seconds;
        }

        public double tokensPerSecond() {
            return expectedTokens / seconds;
        }
    }

    /**
     * The tree size with the most expected tokens per second; ties go to the smaller tree.
     *
     * @param scores each candidate's estimated probability of being accepted (any order; values in [0, 1])
     * @param slotsPerCandidate slots a candidate takes (1, or k + 1 when every node carries k mask slots)
     * @param fixedSlots slots every tree has (the root, and its mask slots)
     * @param host host seconds per step (null: none)
     */
    public static TreeSize sizeTree(double[] scores, CostTable costs, int slotsPerCandidate, int fixedSlots,
                                    HostCost host) {
        return sizeTree(scores, costs, slotsPerCandidate, fixedSlots, host, 0);
    }

    /** As above, keeping at least {@code minCandidates} where the scores and the widest graph allow (exploration). */
    public static TreeSize sizeTree(double[] scores, CostTable costs, int slotsPerCandidate, int fixedSlots,
                                    HostCost host, int minCandidates) {
        if (host == null) {
            host = new HostCost(0.0, 0.0);
        }
        if (slotsPerCandidate < 1 || fixedSlots < 1) {
            throw new IllegalArgumentException("slots per candidate and fixed slots must be >= 1, got "
                    + slotsPerCandidate + ", " + fixedSlots);
        }
        for (double s : scores) {
            if (!(s >= 0 && s <= 1)) {
                throw new IllegalArgumentException("candidate scores are acceptance probabilities: finite values in "
                        + "[0, 1], got " + s);
            }
        }
        int[] widths = costs.seconds.keySet().stream().mapToInt(Integer::intValue).toArray(); // ascending
        int widest = widths[widths.length - 1];
        if (fixedSlots > widest) {
            throw new IllegalArgumentException("a tree of " + fixedSlots + " fixed slots fits no width of the cost "
                    + "table (" + Arrays.toString(widths) + ")");
        }
        double[] sorted = scores.clone();
        Arrays.sort(sorted);
        int most = Math.min(scores.length, (widest - fixedSlots) / slotsPerCandidate);
        TreeSize best = null;
        double gain = 0.0; // the n best candidates' sum, added best first as numpy's cumsum of the sorted scores
        for (int n = 0; n <= most; n++) {
            if (n > 0) {
                gain += sorted[sorted.length - n];
            }
            if (n < Math.min(minCandidates, most)) {
                continue;
            }
            int slots = fixedSlots + n * slotsPerCandidate;
            int width = widest;
            for (int w : widths) {
                if (w >= slots) {
                    width = w;
                    break;
                }
            }
            TreeSize size = new TreeSize(n, slots, width, 1.0 + gain, costs.seconds.get(width) + host.seconds(slots));
            if (best == null || size.tokensPerSecond() > best.tokensPerSecond() * (1 + 1e-12)) {
                best = size;
            }
        }
        return best;
    }
}

package org.mtpedge.engine.drafters;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

import org.mtpedge.engine.DraftTree;

/**
 * Lookup candidates as a scored pool, and the per-depth acceptance rates that score them, per match class: the
 * matched n-gram length and whether the previous step accepted a lookup draft (lookup.NgramSource).
 */
final class NgramSource {
    /** Each match class's rates at depths 1, 2, 3+ before any evidence, worth PRIOR_WEIGHT tries (lookup.py). */
    private static final double[][][] MATCH_CLASS_PRIORS = { // [n - 1][streak ? 1 : 0]
        {{0.23, 0.52, 0.6}, {0.29, 0.59, 0.75}},
        {{0.40, 0.56, 0.8}, {0.60, 0.73, 0.8}},
        {{0.55, 0.33, 0.5}, {0.76, 0.88, 0.93}},
    };
    private static final double PRIOR_WEIGHT = 4.0;
    private final int maxNgram;
    private final int minNgram;
    private final int length;
    private final int branches;
    private final Map<Integer, DepthRates> classes = new HashMap<>();
    DepthRates rates; // the rates of the current step's match class
    private boolean streak; // the previous step accepted a lookup draft

    NgramSource(int maxNgram, int minNgram, int length, int branches) {
        if (length < 1 || branches < 1) {
            throw new IllegalArgumentException("lookup length and branches must be >= 1, got " + length + ", "
                    + branches);
        }
        this.maxNgram = maxNgram;
        this.minNgram = minNgram;
        this.length = length;
        this.branches = branches;
        this.rates = new DepthRates(length);
    }

    /** Forget what earlier generations taught (a new prompt). */
    void reset() {
        classes.clear();
        rates = new DepthRates(length);
        streak = false;
    }

    /** A class's rates before any evidence: its measured prior (n-grams past 3 count as 3). */
    private DepthRates newRates(int n, boolean afterAccepted) {
        if (n < 1) {
            return new DepthRates(length);
        }
        return new DepthRates(length, MATCH_CLASS_PRIORS[Math.min(n, 3) - 1][afterAccepted ? 1 : 0], PRIOR_WEIGHT);
    }

    TreeBuild.Pool pool(int[] contextIds, int root) {
        Ngram.Match match = Ngram.match(contextIds, maxNgram, minNgram, length, branches);
        List<int[]> found = match.found();
        rates = classes.computeIfAbsent(2 * match.n() + (streak ? 1 : 0), key -> newRates(match.n(), streak));
        List<double[]> scores = new ArrayList<>();
        for (int rank = 0; rank < found.size(); rank++) {
            scores.add(rates.chainScores(found.get(rank).length, 1.0 / (rank + 1)));
        }
        return TreeBuild.chainPool(root, found, scores);
    }

    /** Update the rates from this call's lookup nodes ({@code fromLookup}: one flag per token node). */
    void record(DraftTree tree, boolean[] fromLookup, int[] path) {
        int n = fromLookup.length;
        boolean[] onPath = new boolean[n];
        for (int p : path) {
            onPath[p] = true;
        }
        int[] depth = new int[n];
        for (int i = 1; i < n; i++) {
            depth[i] = depth[tree.parent(i)] + 1;
        }
        int count = 0;
        for (int i = 1; i < n; i++) {
            count += fromLookup[i] ? 1 : 0;
        }
        int[] depths = new int[count];
        boolean[] parentAccepted = new boolean[count];
        boolean[] accepted = new boolean[count];
        int k = 0;
        for (int i = 1; i < n; i++) { // the root is never a lookup candidate
            if (fromLookup[i]) {
                depths[k] = depth[i];
                parentAccepted[k] = onPath[tree.parent(i)];
                accepted[k] = onPath[i];
                k++;
            }
        }
        rates.record(depths, parentAccepted, accepted);
        streak = false;
        for (boolean a : accepted) {
            streak |= a;
        }
    }
}

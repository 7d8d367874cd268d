package org.mtpedge.engine.drafters;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

import org.mtpedge.engine.DraftTree;

/**
 * Lookup candidates as a scored pool, and the per-depth acceptance rates that score them, per match class: the
 * matched n-gram length and whether the previous step accepted a lookup draft (lookup.NgramSource). With a static
 * n-gram table, a step whose context matches fewer than two tokens drafts the table's chain, in classes of its own.
 */
final class NgramSource {
    /** Each match class's rates at depths 1, 2, 3+ before any evidence, worth PRIOR_WEIGHT tries (lookup.py). */
    private static final double[][][] MATCH_CLASS_PRIORS = { // [n - 1][streak ? 1 : 0]
        {{0.23, 0.52, 0.6}, {0.29, 0.59, 0.75}},
        {{0.40, 0.56, 0.8}, {0.60, 0.73, 0.8}},
        {{0.55, 0.33, 0.5}, {0.76, 0.88, 0.93}},
    };
    /** The static table's classes ("static2" .. "static4" in lookup.py): [n - 2][streak ? 1 : 0]. */
    private static final double[][][] STATIC_PRIORS = {
        {{0.44, 0.5, 0.4}, {0.49, 0.6, 0.4}},
        {{0.45, 0.45, 0.6}, {0.5, 0.45, 0.6}},
        {{0.62, 0.54, 0.59}, {0.68, 0.61, 0.7}},
    };
    private static final double PRIOR_WEIGHT = 4.0;
    /** A context match this long beats the static table; shorter ones lose to it (lookup.STATIC_BELOW). */
    private static final int STATIC_BELOW = 2;
    /** Static classes' keys start here, past every context class's (2 * n + streak). */
    private static final int STATIC_CLASSES = 1 << 20;
    private final int maxNgram;
    private final int minNgram;
    private final int length;
    private final int branches;
    private final StaticNgrams table; // null: context matches alone
    private final Map<Integer, DepthRates> classes = new HashMap<>();
    DepthRates rates; // the rates of the current step's match class
    private boolean streak; // the previous step accepted a lookup draft

    NgramSource(int maxNgram, int minNgram, int length, int branches) {
        this(maxNgram, minNgram, length, branches, null);
    }

    NgramSource(int maxNgram, int minNgram, int length, int branches, StaticNgrams table) {
        if (length < 1 || branches < 1) {
            throw new IllegalArgumentException("lookup length and branches must be >= 1, got " + length + ", "
                    + branches);
        }
        this.maxNgram = maxNgram;
        this.minNgram = minNgram;
        this.length = length;
        this.branches = branches;
        this.table = table;
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

    private DepthRates newStaticRates(int n, boolean afterAccepted) {
        if (n < 2 || n > 4) {
            return new DepthRates(length);
        }
        return new DepthRates(length, STATIC_PRIORS[n - 2][afterAccepted ? 1 : 0], PRIOR_WEIGHT);
    }

    TreeBuild.Pool pool(int[] contextIds, int root) {
        Ngram.Match match = Ngram.match(contextIds, maxNgram, minNgram, length, branches);
        List<int[]> found = match.found();
        StaticNgrams.Chain chain = table != null && match.n() < STATIC_BELOW ? table.chain(contextIds, length) : null;
        if (chain != null && chain.n > 0) {
            found = new ArrayList<>();
            found.add(chain.tokens);
            rates = classes.computeIfAbsent(STATIC_CLASSES + 2 * chain.n + (streak ? 1 : 0),
                    key -> newStaticRates(chain.n, streak));
        } else {
            rates = classes.computeIfAbsent(2 * match.n() + (streak ? 1 : 0), key -> newRates(match.n(), streak));
        }
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

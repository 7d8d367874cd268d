package org.mtpedge.engine.drafters;

/**
 * Online per-depth acceptance estimates: rate(d) = P(a depth-d candidate is accepted | its parent was), as
 * (hits + w * prior(d)) / (tries + w), Laplace's (hits + 1) / (tries + 2) unless a drafter knows better; port of
 * {@code mtpedge.runtime.acceptance.DepthRates}.
 */
public final class DepthRates {
    private final long[] tries;
    private final long[] hits;
    private final double[] priorHits;
    private final double priorWeight;

    public DepthRates(int maxDepth) {
        this(maxDepth, new double[] {0.5}, 2.0);
    }

    /** {@code prior}: the rates at depths 1, 2, ... before any evidence, the last repeated for deeper ones. */
    public DepthRates(int maxDepth, double[] prior, double priorWeight) {
        tries = new long[maxDepth + 1];
        hits = new long[maxDepth + 1];
        priorHits = new double[maxDepth + 1];
        priorHits[0] = priorWeight;
        for (int d = 1; d <= maxDepth; d++) {
            priorHits[d] = priorWeight * prior[Math.min(d, prior.length) - 1];
        }
        this.priorWeight = priorWeight;
    }

    public void reset() {
        java.util.Arrays.fill(tries, 0);
        java.util.Arrays.fill(hits, 0);
    }

    public double[] rates() {
        double[] r = new double[tries.length];
        for (int d = 0; d < r.length; d++) {
            r[d] = (hits[d] + priorHits[d]) / (tries[d] + priorWeight);
        }
        r[0] = 1.0;
        return r;
    }

    /** Estimated acceptance probability of each node of a chain of {@code length} (cumulative product). */
    public double[] chainScores(int length, double discount) {
        double[] r = rates();
        int count = Math.max(0, Math.min(length, r.length - 1));
        double[] out = new double[count];
        double product = 1.0;
        for (int i = 0; i < count; i++) {
            product *= r[i + 1];
            out[i] = discount * product;
        }
        return out;
    }

    /** Per depth: one try where some candidate's parent was accepted, one hit where some candidate was. */
    public void record(int[] depths, boolean[] parentAccepted, boolean[] accepted) {
        boolean[] tried = new boolean[tries.length];
        boolean[] hit = new boolean[hits.length];
        for (int i = 0; i < depths.length; i++) {
            if (depths[i] < tries.length) {
                tried[depths[i]] |= parentAccepted[i];
                hit[depths[i]] |= accepted[i];
            }
        }
        for (int d = 0; d < tries.length; d++) {
            tries[d] += tried[d] ? 1 : 0;
            hits[d] += hit[d] ? 1 : 0;
        }
    }
}

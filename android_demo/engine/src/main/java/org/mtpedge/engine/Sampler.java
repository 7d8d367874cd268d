package org.mtpedge.engine;

import java.util.Arrays;
import java.util.Random;

/**
 * Choosing a token from logits: greedy argmax, or a draw from {@link #probabilities} with a seeded generator.
 * The distribution equals the Python runtime's (golden-tested); the random stream cannot (numpy's PCG64 is not
 * Java's), so sampled runs are reproducible per platform only.
 */
public final class Sampler implements Verifier.TokenChooser {
    private final SamplingConfig config;
    private final Random random;

    public Sampler(SamplingConfig config) {
        this.config = config;
        this.random = config.seed == null ? new Random() : new Random(config.seed);
    }

    /** Index of the first maximum, as numpy.argmax. */
    public static int argmax(float[] logits) {
        int best = 0;
        for (int i = 1; i < logits.length; i++) {
            if (logits[i] > logits[best]) {
                best = i;
            }
        }
        return best;
    }

    /** Temperature, then top-k, then top-p (the smallest prefix whose mass reaches top_p, crossing token included). */
    public static double[] probabilities(float[] logits, SamplingConfig config) {
        int v = logits.length;
        double[] scaled = new double[v];
        for (int i = 0; i < v; i++) {
            scaled[i] = (double) logits[i] / config.temperature;
        }
        if (config.topK > 0 && config.topK < v) {
            double[] sorted = scaled.clone();
            Arrays.sort(sorted);
            double kth = sorted[v - config.topK];
            for (int i = 0; i < v; i++) {
                if (scaled[i] < kth) {
                    scaled[i] = Double.NEGATIVE_INFINITY;
                }
            }
        }
        double max = Double.NEGATIVE_INFINITY;
        for (double s : scaled) {
            max = Math.max(max, s);
        }
        double[] probs = new double[v];
        double sum = 0;
        for (int i = 0; i < v; i++) {
            probs[i] = Math.exp(scaled[i] - max);
            sum += probs[i];
        }
        for (int i = 0; i < v; i++) {
            probs[i] /= sum;
        }
        if (config.topP < 1.0) {
            Integer[] order = new Integer[v];
            for (int i = 0; i < v; i++) {
                order[i] = i;
            }
            final double[] p = probs;
            Arrays.sort(order, (a, b) -> Double.compare(p[b], p[a])); // stable: ties keep index order
            double cumulative = 0;
            int keep = v;
            for (int r = 0; r < v; r++) {
                cumulative += probs[order[r]];
                if (cumulative >= config.topP) {
                    keep = r + 1;
                    break;
                }
            }
            double[] filtered = new double[v];
            double kept = 0;
            for (int r = 0; r < keep; r++) {
                filtered[order[r]] = probs[order[r]];
                kept += probs[order[r]];
            }
            for (int i = 0; i < v; i++) {
                filtered[i] /= kept;
            }
            probs = filtered;
        }
        return probs;
    }

    @Override
    public int choose(float[] logits) {
        if (config.isGreedy()) {
            return argmax(logits);
        }
        double[] probs = probabilities(logits, config);
        double u = random.nextDouble();
        double cumulative = 0;
        int last = 0;
        for (int i = 0; i < probs.length; i++) {
            if (probs[i] > 0) {
                cumulative += probs[i];
                last = i;
                if (u < cumulative) {
                    return i;
                }
            }
        }
        return last; // rounding left u above the total mass
    }
}

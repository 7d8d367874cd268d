package org.mtpedge.engine.drafters;

import java.util.Arrays;
import java.util.Map;

import org.mtpedge.engine.BundleException;
import org.mtpedge.engine.Embeddings;
import org.mtpedge.engine.Npy;

/**
 * The adapter's trained sampler head on the host; port of {@code mtpedge.runtime.drafters.mtp_head.SamplerHead}.
 * Draft j comes from [embedding of draft j-1 (the root for j = 1); hidden state of mask j], in the adapter's form:
 *
 * <pre>
 *   residual  h' = h + W2 rmsnorm(silu(W1 [e_prev; h] + b1)) + b2
 *   paper     h' = rmsnorm2(silu(W2 rmsnorm(silu(W1 [e_prev; h] + b1)) + b2))
 *   logits = U h'
 * </pre>
 *
 * With {@code candidates} &gt; 0 only the top rows of the mask's plain logits (which the graph already computed) are
 * scored: drafts are proposals only, so the shortlist changes speed, never the output.
 */
public final class SamplerHead {
    private final float[] w1; // (inner, 2 * hidden)
    private final float[] b1;
    private final float[] norm;
    private final double eps;
    private final float[] w2; // (hidden, inner)
    private final float[] b2;
    private final float[] norm2; // the paper's second block; null in the residual form
    private final int hidden;
    private final int inner;
    private final Embeddings table;
    private final Embeddings unembed;
    private final int candidates;

    SamplerHead(Map<String, Npy.Array> weights, boolean paper, Embeddings table, Embeddings unembed, int candidates) {
        Npy.Array fc1 = weight(weights, "fc1_weight");
        Npy.Array fc2 = weight(weights, "fc2_weight");
        this.hidden = table.dim();
        this.inner = fc1.shape[0];
        if (fc1.shape.length != 2 || fc1.shape[1] != 2 * hidden || fc2.shape.length != 2 || fc2.shape[0] != hidden
                || fc2.shape[1] != inner || unembed.dim() != hidden) {
            throw new BundleException("the sampler head's weights (fc1 " + Arrays.toString(fc1.shape) + ", fc2 "
                    + Arrays.toString(fc2.shape) + ") do not fit hidden size " + hidden + ": re-export the bundle");
        }
        this.w1 = fc1.data;
        this.b1 = weight(weights, "fc1_bias").data;
        this.norm = weight(weights, "norm_weight").data;
        this.eps = weight(weights, "eps").data[0];
        this.w2 = fc2.data;
        this.b2 = weight(weights, "fc2_bias").data;
        this.norm2 = paper ? weight(weights, "norm2_weight").data : null;
        this.table = table;
        this.unembed = unembed;
        this.candidates = candidates;
    }

    private static Npy.Array weight(Map<String, Npy.Array> weights, String name) {
        Npy.Array a = weights.get(name);
        if (a == null) {
            throw new BundleException("the sampler head file lacks " + name + ": re-export the bundle");
        }
        return a;
    }

    /** The head's hidden state after {@code prevToken} for one mask's hidden state (float32, as numpy computes). */
    float[] hiddenAfter(int prevToken, float[] maskHidden) {
        float[] x = new float[2 * hidden];
        table.copyRow(prevToken, x, 0);
        System.arraycopy(maskHidden, 0, x, hidden, hidden);
        float[] u = linear(w1, b1, x, inner);
        silu(u);
        rmsNorm(u, norm);
        float[] out = linear(w2, b2, u, hidden);
        if (norm2 != null) { // the paper's second block: no skip path
            silu(out);
            rmsNorm(out, norm2);
            return out;
        }
        for (int i = 0; i < hidden; i++) {
            out[i] = maskHidden[i] + out[i];
        }
        return out;
    }

    /** w x + b for a (rows, x.length) row-major w, each dot product summed in double and rounded to float. */
    private static float[] linear(float[] w, float[] b, float[] x, int rows) {
        float[] y = new float[rows];
        for (int i = 0; i < rows; i++) {
            double acc = 0;
            for (int j = 0; j < x.length; j++) {
                acc += w[i * x.length + j] * x[j];
            }
            y[i] = (float) acc + b[i];
        }
        return y;
    }

    private static void silu(float[] v) {
        for (int i = 0; i < v.length; i++) {
            v[i] = (float) (v[i] / (1.0 + Math.exp(-v[i])));
        }
    }

    private void rmsNorm(float[] v, float[] weight) {
        double squares = 0;
        for (float x : v) {
            squares += (double) x * x;
        }
        float root = (float) Math.sqrt((float) ((float) (squares / v.length) + (float) eps));
        for (int j = 0; j < v.length; j++) {
            v[j] = v[j] / root * weight[j];
        }
    }

    /** Ids of the top {@code candidates} plain logits, ascending (null: score the whole vocabulary). */
    int[] shortlist(float[] plainLogits) {
        if (candidates == 0 || candidates >= plainLogits.length) {
            return null;
        }
        int[] rows = TreeBuild.topTokens(TreeBuild.toDouble(plainLogits), candidates, -1);
        Arrays.sort(rows);
        return rows;
    }

    private double[] scores(float[] h, int[] rows) {
        double[] out = new double[rows.length];
        float[] row = new float[hidden];
        for (int r = 0; r < rows.length; r++) {
            unembed.copyRow(rows[r], row, 0);
            double acc = 0;
            for (int j = 0; j < hidden; j++) {
                acc += row[j] * h[j];
            }
            out[r] = (float) acc;
        }
        return out;
    }

    private int[] allRows() {
        int[] rows = new int[unembed.rows()];
        for (int i = 0; i < rows.length; i++) {
            rows[i] = i;
        }
        return rows;
    }

    int bestToken(float[] h, float[] plainLogits) {
        int[] rows = plainLogits == null ? null : shortlist(plainLogits);
        rows = rows == null ? allRows() : rows;
        double[] s = scores(h, rows);
        int best = 0;
        for (int r = 1; r < rows.length; r++) {
            if (s[r] > s[best]) {
                best = r;
            }
        }
        return rows[best];
    }

    /** The {@code count} best next tokens after {@code prevToken} for one mask, best first (ties by lower id). */
    TreeBuild.Expansion topNextTokens(int[] prevTokens, float[] maskHidden, float[] plainLogits, int count) {
        int[] shortlisted = shortlist(plainLogits);
        int[] rows = shortlisted == null ? allRows() : shortlisted;
        int take = Math.min(count, rows.length);
        int[][] tokens = new int[prevTokens.length][take];
        double[][] probs = new double[prevTokens.length][take];
        for (int m = 0; m < prevTokens.length; m++) {
            double[] s = scores(hiddenAfter(prevTokens[m], maskHidden), rows);
            double max = Double.NEGATIVE_INFINITY;
            for (double v : s) {
                max = Math.max(max, v);
            }
            double[] p = new double[s.length];
            for (int r = 0; r < s.length; r++) {
                p[r] = Math.exp(s[r] - max);
            }
            double sum = org.mtpedge.engine.NumpySum.sum(p);
            for (int r = 0; r < s.length; r++) {
                p[r] /= sum;
            }
            int[] best = TreeBuild.topTokens(p, take, -1); // positions in rows (ascending ids: ties by lower id)
            for (int i = 0; i < take; i++) {
                tokens[m][i] = rows[best[i]];
                probs[m][i] = p[best[i]];
            }
        }
        return new TreeBuild.Expansion(tokens, probs);
    }

    /** k drafts after {@code root}, each conditioned on the one before. */
    int[] draft(int root, float[][] maskHidden, float[][] maskLogits) {
        int[] drafts = new int[maskHidden.length];
        int prev = root;
        for (int j = 0; j < maskHidden.length; j++) {
            prev = bestToken(hiddenAfter(prev, maskHidden[j]), maskLogits == null ? null : maskLogits[j]);
            drafts[j] = prev;
        }
        return drafts;
    }
}

package org.mtpedge.engine.drafters;

import org.mtpedge.engine.Embeddings;

/**
 * Mask-slot embeddings for training-free mask-token probing; port of {@code mtpedge.runtime.mask_embeddings}.
 *
 * <p>Initialisations from the input embedding table E: soft = mean of E[prompt tokens]; hard = E[the last k
 * prompt tokens]; mean = the mean row of E; learned = the first k trained masks of the bundle's adapter
 * ({@link MtpAdapter}). Online update after every committed token e:
 * m_j &lt;- m_j + lambda (E[e] - m_j). The "sample" initialisation of the Python runtime draws from numpy's
 * generator, whose stream Java cannot reproduce: it is refused here.
 */
public final class MaskEmbeddings {
    public static final int MAX_SLOTS = 3;

    private final String init;
    private final int slots;
    private final double updateRate;
    private final Embeddings table;
    private final float[][] learned;
    private float[][] masks;
    private double[] tableMean;

    public MaskEmbeddings(String init, int slots, double updateRate, Embeddings table) {
        this(init, slots, updateRate, table, null);
    }

    /** learned: the adapter's trained masks (k', hidden), for init "learned" (k' &gt;= slots). */
    public MaskEmbeddings(String init, int slots, double updateRate, Embeddings table, float[][] learned) {
        if (!init.equals("soft") && !init.equals("hard") && !init.equals("mean") && !init.equals("learned")) {
            throw new IllegalArgumentException("mask init '" + init + "' is not available in the app (soft, hard, "
                    + "mean, learned; 'sample' needs numpy's random stream)");
        }
        if (init.equals("learned") && (learned == null || learned.length < slots || learned[0].length != table.dim())) {
            String have = learned == null ? "none" : learned.length + " x " + learned[0].length;
            throw new IllegalArgumentException("mask init 'learned' needs " + slots + " trained masks of width "
                    + table.dim() + " (the bundle has " + have + "): export the bundle with `mtpedge export "
                    + "--mtp-adapter ADAPTER.pt` (or the default model's shipped masks)");
        }
        if (slots < 1 || slots > MAX_SLOTS) {
            throw new IllegalArgumentException("mask slots must be 1.." + MAX_SLOTS + ", got " + slots);
        }
        if (!(updateRate >= 0 && updateRate <= 1)) {
            throw new IllegalArgumentException("the mask update rate lambda must be in [0, 1], got " + updateRate);
        }
        this.init = init;
        this.slots = slots;
        this.updateRate = updateRate;
        this.table = table;
        this.learned = learned;
        this.masks = new float[slots][table.dim()];
    }

    public int slots() {
        return slots;
    }

    public void start(int[] promptIds) {
        if (promptIds.length == 0) {
            throw new IllegalArgumentException("mask embeddings need a non-empty prompt");
        }
        int d = table.dim();
        masks = new float[slots][];
        if (init.equals("learned")) {
            for (int s = 0; s < slots; s++) {
                masks[s] = learned[s].clone();
            }
        } else if (init.equals("soft")) {
            double[] sum = new double[d];
            float[] row = new float[d];
            for (int id : promptIds) {
                table.copyRow(id, row, 0);
                for (int j = 0; j < d; j++) {
                    sum[j] += row[j];
                }
            }
            float[] mean = new float[d];
            for (int j = 0; j < d; j++) {
                mean[j] = (float) (sum[j] / promptIds.length);
            }
            for (int s = 0; s < slots; s++) {
                masks[s] = mean.clone();
            }
        } else if (init.equals("hard")) {
            for (int s = 0; s < slots; s++) { // a prompt shorter than k repeats its first token
                int from = promptIds.length - slots + s;
                masks[s] = table.row(promptIds[Math.max(0, from)]);
            }
        } else {
            double[] mu = tableMean();
            float[] mean = new float[d];
            for (int j = 0; j < d; j++) {
                mean[j] = (float) mu[j];
            }
            for (int s = 0; s < slots; s++) {
                masks[s] = mean.clone();
            }
        }
    }

    private double[] tableMean() {
        if (tableMean == null) {
            tableMean = table.columnMean();
        }
        return tableMean;
    }

    /** m &lt;- m + rate (e - m) for each committed token in order, in closed form as the Python runtime. */
    public void observeTokens(int[] tokenIds) {
        int n = tokenIds.length;
        if (n == 0 || updateRate == 0.0) {
            return;
        }
        int d = table.dim();
        double keep = 1.0 - updateRate;
        double[] blended = new double[d];
        float[] row = new float[d];
        for (int i = 0; i < n; i++) {
            double weight = updateRate * Math.pow(keep, n - 1 - i); // the newest row weighs `rate`
            table.copyRow(tokenIds[i], row, 0);
            for (int j = 0; j < d; j++) {
                blended[j] += weight * row[j];
            }
        }
        double decay = Math.pow(keep, n);
        for (int s = 0; s < slots; s++) {
            for (int j = 0; j < d; j++) {
                masks[s][j] = (float) (decay * masks[s][j] + blended[j]);
            }
        }
    }

    /** Slot embeddings for {@code owners} nodes with k masks each, owner-major. */
    public float[][] forOwners(int owners) {
        float[][] out = new float[owners * slots][];
        for (int b = 0; b < owners; b++) {
            for (int s = 0; s < slots; s++) {
                out[b * slots + s] = masks[s].clone();
            }
        }
        return out;
    }
}

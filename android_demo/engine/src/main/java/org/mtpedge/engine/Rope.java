package org.mtpedge.engine;

/**
 * Host-side rotary tables; port of {@code mtpedge.runtime.rope}. Computed in double and rounded to float once,
 * as numpy does, so both runtimes feed the graph the same values.
 */
public final class Rope {
    private final double[] invFreq;

    public Rope(RopeConfig rope, int headDim) {
        this.invFreq = inverseFrequencies(rope, headDim);
    }

    public int pairs() {
        return invFreq.length;
    }

    /** Per-pair rotation speeds (head_dim/2), with linear or llama3 scaling applied. */
    public static double[] inverseFrequencies(RopeConfig rope, int headDim) {
        int half = headDim / 2;
        double[] inv = new double[half];
        for (int i = 0; i < half; i++) {
            inv[i] = 1.0 / Math.pow(rope.theta, (2.0 * i) / headDim);
        }
        if (rope.ropeType.equals("linear")) {
            for (int i = 0; i < half; i++) {
                inv[i] /= rope.factor;
            }
        } else if (rope.ropeType.equals("llama3")) {
            // long wavelengths slowed by `factor`, short ones kept, the band between interpolated (Llama 3.1)
            double lowWavelen = rope.originalMaxPosition / rope.lowFreqFactor;
            double highWavelen = rope.originalMaxPosition / rope.highFreqFactor;
            for (int i = 0; i < half; i++) {
                double wavelen = 2 * Math.PI / inv[i];
                double scaled = wavelen > lowWavelen ? inv[i] / rope.factor : inv[i];
                double smooth = (rope.originalMaxPosition / wavelen - rope.lowFreqFactor)
                        / (rope.highFreqFactor - rope.lowFreqFactor);
                double smoothed = (1 - smooth) * scaled / rope.factor + smooth * scaled;
                boolean medium = wavelen >= highWavelen && wavelen <= lowWavelen;
                inv[i] = medium ? smoothed : scaled;
            }
        }
        return inv;
    }

    /** cos (index 0) and sin (index 1) tables, each row-major (positions, head_dim/2): the graph's rope_cos/sin. */
    public float[][] tables(long[] positions) {
        int half = invFreq.length;
        float[] cos = new float[positions.length * half];
        float[] sin = new float[positions.length * half];
        for (int p = 0; p < positions.length; p++) {
            for (int i = 0; i < half; i++) {
                double angle = positions[p] * invFreq[i];
                cos[p * half + i] = (float) Math.cos(angle);
                sin[p * half + i] = (float) Math.sin(angle);
            }
        }
        return new float[][] {cos, sin};
    }
}

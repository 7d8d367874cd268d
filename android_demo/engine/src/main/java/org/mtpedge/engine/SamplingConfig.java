package org.mtpedge.engine;

/** Greedy (temperature 0) or sampling with temperature, top-k and top-p; port of the Python SamplingConfig. */
public final class SamplingConfig {
    public final double temperature;
    public final int topK;
    public final double topP;
    public final Long seed;

    public SamplingConfig(double temperature, int topK, double topP, Long seed) {
        if (temperature < 0) {
            throw new IllegalArgumentException("temperature must be >= 0, got " + temperature);
        }
        if (topK < 0) {
            throw new IllegalArgumentException("top_k must be >= 0, got " + topK);
        }
        if (!(topP > 0 && topP <= 1)) {
            throw new IllegalArgumentException("top_p must be in (0, 1], got " + topP);
        }
        this.temperature = temperature;
        this.topK = topK;
        this.topP = topP;
        this.seed = seed;
    }

    public static SamplingConfig greedy() {
        return new SamplingConfig(0, 0, 1.0, null);
    }

    public boolean isGreedy() {
        return temperature == 0;
    }
}

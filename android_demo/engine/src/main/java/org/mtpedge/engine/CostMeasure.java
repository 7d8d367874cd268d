package org.mtpedge.engine;

import java.util.Arrays;
import java.util.Map;
import java.util.TreeMap;

/**
 * A bundle's cost table measured on this device; port of {@code mtpedge.runtime.cost_measure.measure_cost_table}:
 * the median seconds of a call of each decode width at the bundle's full context (a static graph's cost does not
 * depend on the tree, the tokens or how full the cache is). Takes a few seconds on a phone's CPU; the app measures
 * once per loaded bundle, when it has no profile file.
 */
public final class CostMeasure {
    public static final int REPEATS = 10;
    public static final int WARMUP = 2;

    private CostMeasure() {
    }

    /** The engine's cache position is kept (its contents are not touched: the calls commit nothing). */
    public static CostTable measure(Engine engine, int repeats, int warmup, String device) {
        if (repeats < 1 || warmup < 0) {
            throw new IllegalArgumentException("repeats must be >= 1 and warmup >= 0, got " + repeats + ", " + warmup);
        }
        int nPast = engine.cache.nPast();
        Map<Integer, Double> measured = new TreeMap<>();
        try {
            for (int width : engine.manifest.decodeWidths()) {
                engine.cache.setNPast(Math.max(0, engine.context - width)); // the full-context graphs run
                float[] embeds = new float[width * engine.config.hiddenSize];
                int[] chain = new int[width];
                for (int i = 0; i < width; i++) {
                    chain[i] = i - 1;
                }
                for (int i = 0; i < warmup; i++) {
                    engine.runBlock(embeds, chain);
                }
                double[] seconds = new double[repeats];
                for (int i = 0; i < repeats; i++) {
                    seconds[i] = engine.runBlock(embeds, chain).seconds;
                }
                measured.put(width, median(seconds));
            }
        } finally {
            engine.cache.setNPast(nPast);
        }
        Manifest m = engine.manifest;
        return new CostTable(measured, m.modelName, m.sourceSha256, m.context, device, "measured");
    }

    /** The median, as Python's statistics.median (the mean of the middle two of an even count). */
    static double median(double[] values) {
        double[] sorted = values.clone();
        Arrays.sort(sorted);
        int n = sorted.length;
        return n % 2 == 1 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2;
    }
}

package org.mtpedge.engine;

import java.util.Map;

import org.mtpedge.engine.json.JsonValues;

/** Rotary embedding parameters, read from the bundle (never guessed: transformers versions disagree). */
public final class RopeConfig {
    public final double theta;
    public final String ropeType;
    public final double factor;
    public final double lowFreqFactor;
    public final double highFreqFactor;
    public final double originalMaxPosition;

    public RopeConfig(double theta, String ropeType, double factor, double lowFreqFactor, double highFreqFactor,
                      double originalMaxPosition) {
        if (!ropeType.equals("default") && !ropeType.equals("linear") && !ropeType.equals("llama3")) {
            throw new BundleException("rope type '" + ropeType + "' is not supported (supported: default, linear, "
                    + "llama3)");
        }
        this.theta = theta;
        this.ropeType = ropeType;
        this.factor = factor;
        this.lowFreqFactor = lowFreqFactor;
        this.highFreqFactor = highFreqFactor;
        this.originalMaxPosition = originalMaxPosition;
    }

    public static RopeConfig fromJson(Map<String, Object> map) {
        return new RopeConfig(
                num(map, "theta", 10000.0),
                map.containsKey("rope_type") ? JsonValues.stringField(map, "rope_type", "rope") : "default",
                num(map, "factor", 1.0),
                num(map, "low_freq_factor", 1.0),
                num(map, "high_freq_factor", 4.0),
                num(map, "original_max_position", 8192));
    }

    private static double num(Map<String, Object> map, String key, double fallback) {
        return map.containsKey(key) ? JsonValues.doubleField(map, key, "rope") : fallback;
    }
}

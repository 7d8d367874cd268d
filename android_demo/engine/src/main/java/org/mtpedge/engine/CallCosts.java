package org.mtpedge.engine;

import java.util.Collections;
import java.util.Map;
import java.util.TreeMap;

/**
 * The cost table, corrected by the calls a run makes; port of {@code mtpedge.runtime.tree_sizing.CallCosts}. Per
 * width, a running mean of (call seconds / table seconds), each call's ratio clipped to [low, high] so that one burst
 * of load does not resize every tree. A width not called yet takes the ratio of the nearest narrower width that was
 * (1 if none): the causes (load, cold caches, a smaller context bucket) reach every width; its first call averages
 * from that carried ratio, not from 1. A flat table is not corrected: it is an assumption asked for (trees fill the
 * widest graph), not a measurement.
 */
public final class CallCosts {
    private final CostTable table;
    private final double decay;
    private final double low;
    private final double high;
    private final Map<Integer, Double> ratios = new TreeMap<>(); // width -> running mean ratio, widths called so far
    private CostTable current;

    public CallCosts(CostTable table) {
        this(table, 0.9, 0.5, 2.0);
    }

    public CallCosts(CostTable table, double decay, double low, double high) {
        this.table = table;
        this.decay = decay;
        this.low = low;
        this.high = high;
        this.current = table;
    }

    /** The table as corrected so far. */
    public CostTable current() {
        return current;
    }

    public Map<Integer, Double> ratios() {
        return Collections.unmodifiableMap(ratios);
    }

    public void observe(int width, double seconds) {
        Double listed = table.seconds.get(width);
        if ("flat".equals(table.origin) || listed == null || !(seconds > 0)) {
            return;
        }
        double ratio = Math.min(Math.max(seconds / listed, low), high);
        double before = current.seconds.get(width) / listed; // the ratio this width carried so far
        ratios.put(width, decay * ratios.getOrDefault(width, before) + (1 - decay) * ratio);
        Map<Integer, Double> corrected = new TreeMap<>();
        double carried = 1.0;
        for (Map.Entry<Integer, Double> e : table.seconds.entrySet()) { // narrowest first
            carried = ratios.getOrDefault(e.getKey(), carried);
            corrected.put(e.getKey(), e.getValue() * carried);
        }
        current = table.withSeconds(corrected);
    }
}

package org.mtpedge.engine;

import java.util.Map;

/** Rotary tables (default, linear and llama3 scaling) against numpy's. */
public class RopeGoldenTest {
    public void testRopeTablesMatchPython() {
        for (Map<String, Object> c : Golden.cases(Golden.load("rope.json"), "cases")) {
            RopeConfig rope = RopeConfig.fromJson(Golden.object(c, "rope"));
            int headDim = Golden.integer(c, "head_dim");
            String what = "rope " + rope.ropeType;
            Check.close(Golden.doubles(c, "inv_freq"), Rope.inverseFrequencies(rope, headDim), 1e-15, what + " inv_freq");
            float[][] tables = new Rope(rope, headDim).tables(Golden.longs(c, "positions"));
            // the angles are equal doubles; Math.cos and numpy's cos may differ in the last double bit, which can
            // move the float32 result by one ulp (6e-8 near 1)
            Check.close(Golden.floats(c, "cos"), tables[0], 2e-7, what + " cos");
            Check.close(Golden.floats(c, "sin"), tables[1], 2e-7, what + " sin");
        }
    }
}

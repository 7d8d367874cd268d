package org.mtpedge.engine;

import java.util.Arrays;
import java.util.List;
import java.util.Map;

import org.mtpedge.engine.json.JsonValues;

/** Trees -> attention rows, depths, paths and one call's positions / attention bias, as the Python runtime. */
public class LayoutGoldenTest {
    private final Map<String, Object> golden = Golden.load("layout.json");

    public void testTreeLayoutMatchesPython() {
        int index = 0;
        for (Map<String, Object> c : Golden.cases(golden, "cases")) {
            String what = "case " + index++ + " parents " + Arrays.toString(Golden.ints(c, "parents"));
            TreeLayout layout = TreeLayout.of(Golden.ints(c, "parents"));
            List<Object> visible = Golden.list(c, "visible");
            for (int i = 0; i < visible.size(); i++) {
                int[] row = JsonValues.intArray(visible.get(i), "visible row");
                int[] actual = new int[row.length];
                for (int j = 0; j < row.length; j++) {
                    actual[j] = layout.visible[i][j] ? 1 : 0;
                }
                Check.equal(row, actual, what + " visible row " + i);
            }
            Check.equal(Golden.ints(c, "depth"), layout.depth, what + " depth");
            List<Object> paths = Golden.list(c, "paths");
            Check.equal(paths.size(), layout.paths.size(), what + " path count");
            for (int p = 0; p < paths.size(); p++) {
                Check.equal(JsonValues.intArray(paths.get(p), "path"), layout.paths.get(p), what + " path " + p);
            }
        }
    }

    public void testBlockInputsMatchPython() {
        int index = 0;
        for (Map<String, Object> c : Golden.cases(golden, "cases")) {
            String what = "case " + index++;
            int[] parents = Golden.ints(c, "parents");
            int context = Golden.integer(c, "context");
            float mask = (float) Golden.number(c, "mask_value");
            int width = 0;
            for (int w : Golden.ints(c, "widths")) { // the narrowest graph that fits, as GraphSet.entry_for
                if (w >= parents.length) {
                    width = w;
                    break;
                }
            }
            Check.equal(Golden.integer(c, "width"), width, what + " chosen width");
            BlockInputs inputs = BlockInputs.build(parents, Golden.integer(c, "n_past"), width, context, mask);
            Check.equal(Golden.longs(c, "positions"), inputs.positions, what + " positions");
            List<Object> runs = Golden.list(c, "bias_zero_runs");
            Check.equal(width, runs.size(), what + " bias rows");
            for (int row = 0; row < width; row++) {
                int[][] expected = Golden.runsOf(runs.get(row));
                int[][] actual = Golden.zeroRuns(inputs.attentionBias, row, context + width);
                Check.isTrue(Arrays.deepEquals(expected, actual), what + " bias row " + row + ": expected zero runs "
                        + Arrays.deepToString(expected) + ", got " + Arrays.deepToString(actual));
            }
            for (float v : inputs.attentionBias) {
                Check.isTrue(v == 0f || v == mask, what + ": bias value " + v + " is neither 0 nor the mask value");
            }
        }
    }

    public void testInvalidParentsAreRefusedAsInPython() {
        for (Object bad : Golden.list(golden, "invalid_parents")) {
            int[] parents = JsonValues.intArray(bad, "parents");
            Check.throwsError(IllegalArgumentException.class, () -> TreeLayout.of(parents),
                    "parents " + Arrays.toString(parents));
        }
    }
}

package org.mtpedge.engine;

import java.util.Arrays;
import java.util.List;
import java.util.Map;

import org.mtpedge.engine.json.JsonValues;

/**
 * Trees -> attention rows, depths, paths and one call's positions / cache slots / attention bias (or its refusal
 * at the end of the context), as the Python runtime.
 */
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
        int refused = 0;
        int cut = 0;
        for (Map<String, Object> c : Golden.cases(golden, "cases")) {
            String what = "case " + index++;
            int[] parents = Golden.ints(c, "parents");
            int context = Golden.integer(c, "context");
            int nPast = Golden.integer(c, "n_past");
            float mask = (float) Golden.number(c, "mask_value");
            int width = 0;
            for (int w : Golden.ints(c, "widths")) { // the narrowest graph that fits, as GraphSet.entry_for
                if (w >= parents.length) {
                    width = w;
                    break;
                }
            }
            if (Boolean.TRUE.equals(c.get("overflow"))) { // Python refused this block: no room in the context
                int chosen = width;
                ContextOverflowException err = Check.throwsError(ContextOverflowException.class,
                        () -> BlockInputs.build(parents, nPast, chosen, context, mask), what + " at n_past " + nPast);
                Check.isTrue(err.getMessage().contains("context " + context), err.getMessage());
                refused++;
                continue;
            }
            Check.equal(Golden.integer(c, "width"), width, what + " chosen width");
            BlockInputs inputs = BlockInputs.build(parents, nPast, width, context, mask);
            Check.equal(Golden.longs(c, "positions"), inputs.positions, what + " positions");
            Check.equal(Golden.integer(c, "plain_rows"), Math.min(inputs.rowsInContext, Engine.leadingChain(parents)),
                    what + " plain rows (the leading chain inside the context)");
            Check.equal(Golden.longs(c, "cache_slots"), inputs.cacheSlots, what + " cache slots");
            List<Object> runs = Golden.list(c, "bias_zero_runs");
            Check.equal(width, runs.size(), what + " bias rows");
            Check.equal(width * context, inputs.attentionBias.length, what + " bias size (W x C)");
            for (int row = 0; row < width; row++) {
                int[][] expected = Golden.runsOf(runs.get(row));
                int[][] actual = Golden.zeroRuns(inputs.attentionBias, row, context);
                Check.isTrue(Arrays.deepEquals(expected, actual), what + " bias row " + row + ": expected zero runs "
                        + Arrays.deepToString(expected) + ", got " + Arrays.deepToString(actual));
            }
            cut += inputs.rowsInContext < parents.length ? 1 : 0;
            for (float v : inputs.attentionBias) {
                Check.isTrue(v == 0f || v == mask, what + ": bias value " + v + " is neither 0 nor the mask value");
            }
        }
        Check.isTrue(refused > 0 && cut > 0, "the golden cases hold no block refused (" + refused + ") or cut ("
                + cut + ") at the context's end");
    }

    public void testInvalidParentsAreRefusedAsInPython() {
        for (Object bad : Golden.list(golden, "invalid_parents")) {
            int[] parents = JsonValues.intArray(bad, "parents");
            Check.throwsError(IllegalArgumentException.class, () -> TreeLayout.of(parents),
                    "parents " + Arrays.toString(parents));
        }
    }
}

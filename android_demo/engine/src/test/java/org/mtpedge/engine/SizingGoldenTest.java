package org.mtpedge.engine;

import java.util.HashMap;
import java.util.List;
import java.util.Map;

import org.mtpedge.engine.json.JsonValues;

/** Cost-aware tree sizing against the Python runtime: size_tree, StepSizer runs, cost table files. */
public class SizingGoldenTest {
    private final Map<String, Object> golden = Golden.load("sizing.json");

    private static CostTable table(Map<String, Object> c) {
        Map<Integer, Double> seconds = new HashMap<>();
        for (Map.Entry<String, Object> e : Golden.object(c, "seconds").entrySet()) {
            seconds.put(Integer.parseInt(e.getKey()), JsonValues.doubleValue(e.getValue(), "seconds"));
        }
        String origin = c.containsKey("origin") ? JsonValues.stringField(c, "origin", "table") : "golden";
        return new CostTable(seconds, "golden", "", 64, "golden", origin);
    }

    private static void checkSize(Map<String, Object> expected, TreeSizing.TreeSize actual, String what) {
        Check.equal(Golden.integer(expected, "candidates"), actual.candidates, what + " candidates");
        Check.equal(Golden.integer(expected, "slots"), actual.slots, what + " slots");
        Check.equal(Golden.integer(expected, "width"), actual.width, what + " width");
        Check.equal(Golden.number(expected, "expected_tokens"), actual.expectedTokens, what + " expected tokens");
        Check.equal(Golden.number(expected, "seconds"), actual.seconds, what + " seconds");
    }

    public void testTreeSizesMatchPython() {
        int index = 0;
        for (Map<String, Object> c : Golden.cases(golden, "size_tree")) {
            TreeSizing.TreeSize size = TreeSizing.sizeTree(Golden.doubles(c, "scores"), table(c),
                    Golden.integer(c, "slots_per_candidate"), Golden.integer(c, "fixed_slots"),
                    new TreeSizing.HostCost(Golden.number(c, "host_fixed"), Golden.number(c, "host_per_slot")));
            checkSize(Golden.object(c, "size"), size, "size_tree case " + index++);
        }
    }

    /** Whole runs: host seconds learnt from the (scripted) clock, score calibration, the call costs corrected by the
     * calls made, and every step's choice. */
    public void testStepSizerRunsMatchPython() {
        for (Map<String, Object> run : Golden.cases(golden, "step_sizer")) {
            double[] now = {0};
            StepSizer sizer = new StepSizer(table(run), 2.0, 0.9, () -> now[0],
                    Golden.integer(run, "explore_every"));
            int spc = Golden.integer(run, "slots_per_candidate");
            int fixed = Golden.integer(run, "fixed_slots");
            int step = 0;
            for (Map<String, Object> s : Golden.cases(run, "steps")) {
                String what = "step sizer run over " + Golden.object(run, "seconds") + ", step " + step++;
                now[0] = Golden.number(s, "time");
                checkSize(Golden.object(s, "size"), sizer.size(Golden.doubles(s, "scores"), spc, fixed), what);
                sizer.observe(Golden.integer(s, "accepted"), Golden.number(s, "graph_seconds"));
                Check.equal(Golden.number(s, "calibration"), sizer.calibration(), what + " calibration");
                Check.equal(Golden.number(s, "host_fixed"), sizer.host().fixed, what + " host seconds");
                for (Map.Entry<String, Object> e : Golden.object(s, "call_seconds").entrySet()) {
                    Check.equal(JsonValues.doubleValue(e.getValue(), "call seconds"),
                            sizer.callCosts().current().seconds.get(Integer.parseInt(e.getKey())),
                            what + " corrected seconds of width " + e.getKey());
                }
            }
            Map<String, Object> stats = sizer.stats();
            Check.equal(Golden.number(run, "predicted_tokens") / Golden.number(run, "predicted_seconds"),
                    stats.get("predicted_tokens_per_s"), "predicted tokens/s");
            Check.equal(Golden.number(run, "achieved_tokens") / Golden.number(run, "achieved_seconds"),
                    stats.get("achieved_tokens_per_s"), "achieved tokens/s");
            Check.equal(Golden.integer(run, "explored_steps"), stats.get("explored_steps"), "exploring steps");
        }
    }

    /** Files as read or refused, their check against the tiny bundle's manifest, and the flat table. */
    public void testCostTableFilesMatchPython() {
        Map<String, Object> spec = Golden.object(golden, "cost_tables");
        Manifest manifest = Manifest.parse(Golden.text(JsonValues.stringField(spec, "manifest", "cost_tables")));
        for (Map<String, Object> c : Golden.cases(spec, "cases")) {
            String text = JsonValues.stringField(c, "text", "case");
            if (c.containsKey("error")) {
                try {
                    CostTable.fromJson(text, "cost.json");
                } catch (CostTable.CostTableException err) {
                    continue;
                }
                throw new AssertionError("a cost table Python refuses (" + c.get("error") + ") was read: " + text);
            }
            CostTable table = CostTable.fromJson(text, "cost.json");
            Map<String, Object> seconds = Golden.object(c, "seconds");
            Check.equal(seconds.size(), table.seconds.size(), "widths of " + text);
            for (Map.Entry<String, Object> e : seconds.entrySet()) {
                Check.equal(JsonValues.doubleValue(e.getValue(), "s"), table.seconds.get(Integer.parseInt(e.getKey())),
                        "seconds of width " + e.getKey());
            }
            Check.equal(c.get("check"), table.check(manifest), "check of " + text + " against the manifest");
        }
        Map<String, Object> flat = Golden.object(spec, "flat");
        CostTable table = CostTable.flat(manifest);
        Check.equal(flat.size(), table.seconds.size(), "flat table widths");
        for (String width : flat.keySet()) {
            Check.equal(1.0, table.seconds.get(Integer.parseInt(width)), "flat seconds of width " + width);
        }
        Check.equal(null, table.check(manifest), "the flat table fits its bundle");
    }

    /** A measured table: the median of each decode width's calls, run at the full context, the cache kept. */
    public void testCostMeasureTakesMediansAtTheFullContext() {
        Manifest manifest = Manifest.parse(Golden.text("manifest_tiny.json"));
        DecoderConfig cfg = manifest.config;
        List<String> calls = new java.util.ArrayList<>();
        GraphRunner runner = new GraphRunner() {
            private int count;

            @Override
            public GraphOutput run(GraphEntry graph, float[] embeds, BlockInputs inputs, float[] cos, float[] sin,
                                   KvCache cache) {
                calls.add(graph.width + "@" + cache.nPast());
                java.nio.FloatBuffer[] kv = new java.nio.FloatBuffer[cfg.numLayers];
                double seconds = graph.width * 0.001 + (count++ % 3) * 0.0001; // jitter 0, 1, 2 (x 0.1 ms)
                return new GraphOutput(inputs.realSlots, cfg.vocabSize, new float[inputs.realSlots * cfg.vocabSize],
                        graph.width, kv, kv, seconds);
            }

            @Override
            public String describe() {
                return "fake";
            }

            @Override
            public void close() {
            }
        };
        Engine engine = new Engine(manifest, ReplayRunner.sparseEmbeddings("tiny", cfg.vocabSize, cfg.hiddenSize),
                runner);
        engine.cache.setNPast(5);
        CostTable table = CostMeasure.measure(engine, 5, 1, "fake device");
        Check.equal(5, engine.cache.nPast(), "n_past after measuring");
        Check.equal(null, table.check(manifest), "a measured table fits its bundle");
        int[] widths = manifest.decodeWidths();
        Check.equal(widths.length * 6, calls.size(), "calls: 1 warm-up + 5 timed per width " + calls);
        int call = 0;
        for (int width : widths) {
            double[] timed = new double[5];
            for (int i = 0; i < 6; i++, call++) {
                Check.equal(width + "@" + (manifest.context - width), calls.get(call), "call " + call);
                if (i > 0) {
                    timed[i - 1] = width * 0.001 + (call % 3) * 0.0001;
                }
            }
            java.util.Arrays.sort(timed);
            Check.equal(timed[2], table.seconds.get(width), "median seconds of width " + width);
        }
    }

    public void testBadScoresAndTablesAreRefused() {
        CostTable costs = new CostTable(java.util.Collections.singletonMap(8, 1.0), "m", "", 64, "d", "o");
        for (double[] scores : new double[][] {{1.5}, {-0.1}, {Double.NaN}}) {
            try {
                TreeSizing.sizeTree(scores, costs, 1, 1, null);
                throw new AssertionError("scores " + java.util.Arrays.toString(scores) + " were accepted");
            } catch (IllegalArgumentException expected) {
                Check.isTrue(expected.getMessage().contains("[0, 1]"), expected.getMessage());
            }
        }
        try {
            TreeSizing.sizeTree(new double[0], costs, 1, 9, null);
            throw new AssertionError("9 fixed slots fit a table whose widest width is 8");
        } catch (IllegalArgumentException expected) {
            Check.isTrue(expected.getMessage().contains("fits no width"), expected.getMessage());
        }
        List<String> refused = new java.util.ArrayList<>();
        for (String text : new String[] {"{", "{\"format\": \"mtpedge-cost-table\", \"version\": 1}"}) {
            try {
                CostTable.fromJson(text, "cost.json");
            } catch (CostTable.CostTableException err) {
                refused.add(err.getMessage());
            }
        }
        Check.equal(2, refused.size(), "refusals " + refused);
    }
}

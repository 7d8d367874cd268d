package org.mtpedge.engine;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.function.Function;

import org.mtpedge.engine.drafters.Drafters;
import org.mtpedge.engine.json.JsonValues;

/**
 * The whole Java decode loop (engine, block inputs, KV commits, verifier, generate loop, drafters) replayed
 * against decodes the Python runtime recorded on the real SmolLM2 bundle: same graph calls with the same inputs,
 * same trees, same accepted paths, same tokens.
 */
public class DecodeReplayTest {
    /** The exported SmolLM2 bundle, where this machine has one: MTPEDGE_BUNDLE, else mtpedge's cache folder. */
    static Path realBundle() {
        String env = System.getenv("MTPEDGE_BUNDLE");
        String cache = System.getenv("MTPEDGE_CACHE");
        Path root = cache != null ? Path.of(cache) : Path.of(System.getProperty("user.home"), ".cache", "mtpedge");
        Path path = env != null ? Path.of(env) : root.resolve("bundles").resolve("SmolLM2-135M-Instruct-cl1024");
        return Files.isRegularFile(path.resolve("manifest.json")) ? path : null;
    }

    /**
     * Every recorded decode (listed in decodes.json): plain greedy and each drafter, on SmolLM2 and on a tiny
     * random model whose runs end at the context limit. The drafter comes from the recording's registry name and
     * options, built by the app's registry ({@link Drafters}).
     */
    public void testEveryRecordedDecodeReplaysPython() {
        List<String> failed = new ArrayList<>();
        List<Object> files = Golden.list(Golden.load("decodes.json"), "files");
        Check.isTrue(files.size() >= 2, "decodes.json lists " + files.size() + " recordings");
        for (Object f : files) {
            String file = (String) f;
            try {
                Map<String, Object> recording = Golden.load(file);
                Object name = recording.get("drafter");
                Map<String, String> options = new HashMap<>();
                for (Map.Entry<String, Object> e : Golden.object(recording, "options").entrySet()) {
                    options.put(e.getKey(), String.valueOf(e.getValue()));
                }
                replay(file, engine -> name == null ? null : Drafters.make((String) name, engine, options));
                System.out.println("    replayed " + file);
            } catch (AssertionError | RuntimeException err) {
                failed.add(file + ": " + err.getMessage());
            }
        }
        Check.isTrue(failed.isEmpty(), failed.size() + " of " + files.size() + " recordings differ: "
                + String.join("; ", failed));
    }

    /** A bundle without an adapter: mtp and learned masks are refused, naming the export that makes one. */
    public void testMtpAndLearnedMasksNeedAnAdapterBundle() {
        Manifest manifest = Manifest.parse(Golden.text("manifest_tiny.json"));
        DecoderConfig cfg = manifest.config;
        Engine engine = new Engine(manifest, ReplayRunner.sparseEmbeddings("tiny", cfg.vocabSize, cfg.hiddenSize),
                new ReplayRunner(Golden.load("decode_tiny_plain.json"), cfg.vocabSize));
        Map<String, String> learned = new HashMap<>();
        learned.put("mask_init", "learned");
        for (String[] spec : new String[][] {{"mtp", ""}, {"hybrid", "learned"}, {"esp", "learned"}}) {
            try {
                Drafters.make(spec[0], engine, spec[1].isEmpty() ? new HashMap<>() : learned);
                throw new AssertionError(spec[0] + " was made on a bundle without an adapter");
            } catch (BundleException err) {
                Check.isTrue(err.getMessage().contains("--mtp-adapter"), err.getMessage());
            }
        }
        Check.equal("mean", org.mtpedge.engine.drafters.MaskSettings.resolve(engine, null, 1, null).init,
                "default mask init without learned masks");
    }

    /** Cancellation is polled between steps: the tokens so far are kept, a prefix of the uncancelled run's. */
    public void testCancellationStopsBetweenSteps() {
        Map<String, Object> recording = Golden.load("decode_tiny_plain.json");
        Manifest manifest = Manifest.parse(Golden.text("manifest_tiny.json"));
        DecoderConfig cfg = manifest.config;
        ReplayRunner runner = new ReplayRunner(recording, cfg.vocabSize);
        Engine engine = new Engine(manifest, ReplayRunner.sparseEmbeddings("tiny", cfg.vocabSize, cfg.hiddenSize),
                runner);
        Generator.Options options = new Generator.Options();
        options.maxNewTokens = Golden.integer(recording, "max_new_tokens");
        int[] seen = {0};
        options.listener = tokens -> seen[0] += tokens.length;
        options.shouldStop = () -> seen[0] >= 5;
        Generator.Result result = Generator.generate(engine, Golden.ints(recording, "prompt_ids"), options);
        Check.equal("cancelled", result.stats.finishReason, "finish reason");
        Check.equal(Arrays.copyOf(Golden.ints(recording, "token_ids"), 5), result.tokenIds, "tokens before cancel");
        Check.equal(4, result.stats.decodeCalls, "decode calls before cancel");
    }

    /** Records the trees the drafter observes (every step it drafted: not the plain step at the last position) and
     *  the paths accepted and the rows verified, to compare with what Python's verifier saw on those steps. */
    static final class Spy implements Drafter {
        final Drafter inner;
        final List<DraftTree> trees = new ArrayList<>();
        final List<int[]> paths = new ArrayList<>();
        final List<Integer> plainRows = new ArrayList<>();

        Spy(Drafter inner) {
            this.inner = inner;
        }

        @Override
        public String name() {
            return inner.name();
        }

        @Override
        public void start(Engine engine, int[] promptIds, float[] prefillLogits) {
            inner.start(engine, promptIds, prefillLogits);
        }

        @Override
        public Proposal propose(int[] contextIds, int root, int lead) {
            return inner.propose(contextIds, root, lead);
        }

        @Override
        public boolean loraOnSlots() {
            return inner.loraOnSlots();
        }

        @Override
        public StepSizer sizer() {
            return inner.sizer();
        }

        @Override
        public void observe(DraftTree tree, GraphOutput out, int[] path) {
            trees.add(tree);
            paths.add(path.clone());
            plainRows.add(out.plainRows());
            inner.observe(tree, out, path);
        }
    }

    /** Replay one recording with the drafter {@code makeDrafter} builds (null: plain decoding). */
    static void replay(String file, Function<Engine, Drafter> makeDrafter) {
        Map<String, Object> recording = Golden.load(file);
        String model = recording.containsKey("model") ? (String) recording.get("model") : "smollm2";
        Manifest manifest = Manifest.parse(Golden.text("manifest_" + model + ".json"));
        DecoderConfig cfg = manifest.config;
        ReplayRunner runner = new ReplayRunner(recording, cfg.vocabSize);
        Engine engine = new Engine(manifest, ReplayRunner.sparseEmbeddings(model, cfg.vocabSize, cfg.hiddenSize),
                runner, Golden.folder("bundle_" + model));
        if (recording.containsKey("cost_table")) { // a cost-aware drafter, on the table it was recorded with
            engine.costTable = CostTable.fromJson(recording.get("cost_table"),
                    file + " cost table");
        }
        Drafter drafter = makeDrafter.apply(engine);
        if (recording.containsKey("clock_step")) {
            Check.isTrue(drafter.sizer() != null, file + ": the drafter made no sizer from the engine's cost table");
            double step = Golden.number(recording, "clock_step");
            int[] ticks = {0};
            drafter.sizer().useClock(() -> ticks[0]++ * step);
        }
        Spy spy = drafter == null ? null : new Spy(drafter);
        Generator.Options options = new Generator.Options();
        options.maxNewTokens = Golden.integer(recording, "max_new_tokens");
        options.drafter = spy;
        options.onOverflow = "stop".equals(recording.get("on_overflow")) ? Generator.OverflowPolicy.STOP
                : Generator.OverflowPolicy.ERROR;
        List<Integer> streamed = new ArrayList<>();
        options.listener = tokens -> {
            for (int t : tokens) {
                streamed.add(t);
            }
        };
        Generator.Result result = Generator.generate(engine, Golden.ints(recording, "prompt_ids"), options);
        String what = file;
        Check.equal(Golden.ints(recording, "token_ids"), result.tokenIds, what + " generated tokens");
        Check.equal(streamed.size(), result.tokenIds.length, what + " streamed token count");
        Check.equal(recording.get("finish_reason"), result.stats.finishReason, what + " finish reason");
        Check.equal(Golden.integer(recording, "decode_calls"), result.stats.decodeCalls, what + " decode calls");
        Check.equal(runner.callsRecorded(), runner.callsReplayed(), what + " graph calls replayed");
        Map<String, Object> histogram = Golden.object(recording, "accepted_per_call");
        Check.equal(histogram.size(), result.stats.acceptedHistogram.size(), what + " accepted histogram " + histogram
                + " vs " + result.stats.acceptedHistogram);
        for (Map.Entry<String, Object> e : histogram.entrySet()) {
            Check.equal(JsonValues.longValue(e.getValue(), "count"),
                    (long) result.stats.acceptedHistogram.getOrDefault(Integer.parseInt(e.getKey()), 0),
                    what + " calls accepting " + e.getKey() + " drafts");
        }
        if (recording.containsKey("sizing")) { // Python rounds its stats: compare to its digits
            Map<String, Object> sizing = Golden.object(recording, "sizing");
            Check.isTrue(result.stats.sizing != null, what + ": no sizing stats");
            Check.close(Golden.number(sizing, "score_calibration"), (Double) result.stats.sizing.get("score_calibration"),
                    1e-4, what + " score calibration");
            Check.close(Golden.number(sizing, "host_s_per_step"), (Double) result.stats.sizing.get("host_s_per_step"),
                    1e-6, what + " host seconds per step");
            Check.close(Golden.number(sizing, "achieved_tokens_per_s"),
                    (Double) result.stats.sizing.get("achieved_tokens_per_s"), 1e-3, what + " achieved tokens/s");
        }
        List<Map<String, Object>> trees = Golden.cases(recording, "trees");
        Map<Integer, int[]> committed = new HashMap<>();
        for (Map<String, Object> commit : Golden.cases(recording, "commits")) {
            committed.put(Golden.integer(commit, "call"), Golden.ints(commit, "slots"));
        }
        if (spy != null) { // the drafter observes the steps it drafted: not a plain step at the last position
            List<Map<String, Object>> observed = new ArrayList<>();
            for (Map<String, Object> tree : trees) {
                if (tree.get("observed") instanceof Map) {
                    @SuppressWarnings("unchecked")
                    Map<String, Object> seen = (Map<String, Object>) tree.get("observed");
                    observed.add(seen);
                }
            }
            Check.equal(observed.size(), spy.trees.size(), what + " trees observed");
            for (int i = 0; i < observed.size(); i++) {
                Map<String, Object> seen = observed.get(i);
                DraftTree expected = new DraftTree(Golden.ints(seen, "tokens"), Golden.ints(seen, "parents"));
                Check.equal(expected, spy.trees.get(i), what + " the drafter's own tree of step " + i);
                Check.equal(Golden.integer(seen, "plain_rows"), Math.min(spy.plainRows.get(i), expected.size()),
                        what + " its rows verified of step " + i + " (the leading chain inside the context)");
                // the accepted path cut to the free positions, and the untrusted rows' greedy path beyond it
                Check.equal(Golden.ints(seen, "path"), spy.paths.get(i), what + " path observed in step " + i);
            }
            for (Map<String, Object> tree : trees) { // the loop commits the accepted path cut to the free positions
                int[] slots = committed.get(Golden.integer(tree, "call"));
                int[] path = Golden.ints(tree, "path");
                Check.isTrue(slots != null && slots.length <= path.length
                        && Arrays.equals(slots, Arrays.copyOf(path, slots.length)), what + " commit of call "
                        + Golden.integer(tree, "call") + ": " + Arrays.toString(slots) + " vs the verified path "
                        + Arrays.toString(path));
            }
        } else {
            Check.equal(trees.size(), result.stats.decodeCalls, what + " steps");
        }
    }
}

package org.mtpedge.engine;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.function.Function;

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

    public void testPlainGreedyDecodeReplaysPython() {
        replay("decode_plain.json", engine -> null);
    }

    /** Records what the drafter proposed and what the loop accepted, to compare with Python's trees. */
    static final class Spy implements Drafter {
        final Drafter inner;
        final List<DraftTree> trees = new ArrayList<>();
        final List<int[]> paths = new ArrayList<>();

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
        public Proposal propose(int[] contextIds, int root) {
            Proposal p = inner.propose(contextIds, root);
            trees.add(p.tree);
            return p;
        }

        @Override
        public void observe(DraftTree tree, GraphOutput out, int[] path) {
            paths.add(path.clone());
            inner.observe(tree, out, path);
        }
    }

    /** Replay one recording with the drafter {@code makeDrafter} builds (null: plain decoding). */
    static void replay(String file, Function<Engine, Drafter> makeDrafter) {
        Map<String, Object> recording = Golden.load(file);
        Manifest manifest = Manifest.parse(Golden.text("manifest_smollm2.json"));
        DecoderConfig cfg = manifest.config;
        ReplayRunner runner = new ReplayRunner(recording, cfg.vocabSize);
        Engine engine = new Engine(manifest, ReplayRunner.sparseEmbeddings(cfg.vocabSize, cfg.hiddenSize),
                runner);
        Drafter drafter = makeDrafter.apply(engine);
        Spy spy = drafter == null ? null : new Spy(drafter);
        Generator.Options options = new Generator.Options();
        options.maxNewTokens = Golden.integer(recording, "max_new_tokens");
        options.drafter = spy;
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
        List<Map<String, Object>> trees = Golden.cases(recording, "trees");
        if (spy != null) {
            Check.equal(trees.size(), spy.trees.size(), what + " trees proposed");
            for (int i = 0; i < trees.size(); i++) {
                DraftTree expected = new DraftTree(Golden.ints(trees.get(i), "tokens"), Golden.ints(trees.get(i),
                        "parents"));
                Check.equal(expected, spy.trees.get(i), what + " tree of step " + i);
                Check.equal(Golden.ints(trees.get(i), "path"), spy.paths.get(i), what + " accepted path of step " + i);
            }
        } else {
            Check.equal(trees.size(), result.stats.decodeCalls, what + " steps");
        }
    }
}

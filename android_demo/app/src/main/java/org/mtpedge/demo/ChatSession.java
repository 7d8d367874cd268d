package org.mtpedge.demo;

import java.io.File;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.function.BooleanSupplier;

import org.mtpedge.engine.CostMeasure;
import org.mtpedge.engine.CostTable;
import org.mtpedge.engine.Drafter;
import org.mtpedge.engine.EmbeddingTable;
import org.mtpedge.engine.Engine;
import org.mtpedge.engine.GenerationStats;
import org.mtpedge.engine.Generator;
import org.mtpedge.engine.Manifest;
import org.mtpedge.engine.drafters.Drafters;
import org.mtpedge.engine.tokenizer.BpeTokenizer;
import org.mtpedge.engine.tokenizer.ChatFormat;
import org.mtpedge.engine.tokenizer.StreamDecoder;

/**
 * One loaded bundle and a conversation: renders the chat, runs the engine's decode loop with the chosen drafter,
 * and streams text deltas. Runs on a background thread; callbacks arrive on that thread.
 */
final class ChatSession implements AutoCloseable {
    /** Receives streamed text and live stats while a reply is generated. */
    interface Listener {
        void onText(String delta);

        /** tokens so far; tau and tok/s over the decode calls after the first token (as GenerationStats). */
        void onProgress(int tokens, double tokensPerCall, double tokensPerSecond);
    }

    private final Engine engine;

    /** The bundle's default drafter (Drafters.defaultFor: "none" where drafting would not equal plain decoding). */
    public String defaultDrafter() {
        return Drafters.defaultFor(engine.manifest);
    }
    private final BpeTokenizer tokenizer;
    private final ChatFormat format;
    private final List<ChatFormat.Message> history = new ArrayList<>();
    final String description;

    private ChatSession(Engine engine, BpeTokenizer tokenizer, ChatFormat format, String description) {
        this.engine = engine;
        this.tokenizer = tokenizer;
        this.format = format;
        this.description = description;
    }

    static ChatSession open(File folder, boolean useQnn, int threads) {
        Manifest manifest = Manifest.read(folder.toPath());
        BpeTokenizer tokenizer = BpeTokenizer.load(folder.toPath().resolve(manifest.tokenizerFile));
        ChatFormat format = new ChatFormat(manifest.chatTemplate);
        EmbeddingTable embeddings = EmbeddingTable.open(folder.toPath().resolve(manifest.embeddingsFile));
        OrtGraphRunner runner = OrtGraphRunner.open(folder, manifest, useQnn, threads);
        Engine engine = new Engine(manifest, embeddings, runner, folder.toPath());
        String costs = attachCostTable(engine, folder, useQnn, runner.describe());
        String description = manifest.modelName + " · context " + manifest.context + " · " + runner.describe() + " · "
                + costs;
        return new ChatSession(engine, tokenizer, format, description);
    }

    /** The profile file pushed into the bundle folder (`mtpedge hub profile --cost-file`), checked against it. */
    static final String COST_FILE = "cost_table.json";

    /**
     * The cost table the lookup and hybrid drafters size their trees with (as `mtpedge generate --cost-model`):
     * the bundle's profile file when it fits the bundle; else flat on the NPU (every width costs the same) and
     * measured here on the CPU. Returns what was chosen, for the description line.
     */
    private static String attachCostTable(Engine engine, File folder, boolean useQnn, String device) {
        String problem = null;
        File file = new File(folder, COST_FILE);
        if (file.isFile()) {
            try {
                CostTable table = CostTable.load(file.toPath());
                problem = table.check(engine.manifest);
                if (problem == null) {
                    engine.costTable = table;
                    return "costs: " + COST_FILE + " (" + table.origin + ")";
                }
            } catch (CostTable.CostTableException err) {
                problem = err.getMessage();
            }
        }
        engine.costTable = useQnn ? CostTable.flat(engine.manifest)
                : CostMeasure.measure(engine, CostMeasure.REPEATS, CostMeasure.WARMUP, device);
        return "costs: " + engine.costTable.origin + (problem == null ? "" : " (" + COST_FILE + " ignored: " + problem
                + ")");
    }

    /** Generate the assistant's reply to {@code userText}; the conversation keeps both turns. */
    GenerationStats reply(String userText, String drafterName, int maxNewTokens, Listener listener,
                          BooleanSupplier cancelled) {
        history.add(new ChatFormat.Message("user", userText));
        int[] prompt = fitPrompt(maxNewTokens);
        Drafter drafter = Drafters.make(drafterName, engine, new HashMap<>());
        StreamDecoder stream = new StreamDecoder(tokenizer);
        Generator.Options options = new Generator.Options();
        options.maxNewTokens = Math.max(1, Math.min(maxNewTokens, engine.context - prompt.length));
        options.drafter = drafter;
        options.onOverflow = Generator.OverflowPolicy.STOP;
        options.shouldStop = cancelled;
        int[] produced = {0};
        long[] firstTokenAt = {0};
        int[] callsAtFirstToken = {0};
        options.listener = tokens -> {
            if (produced[0] == 0) { // the first token comes from prefill; decode speed is measured after it
                firstTokenAt[0] = System.nanoTime();
                callsAtFirstToken[0] = engine.graphCalls();
            }
            produced[0] += tokens.length;
            String delta = stream.push(tokens);
            if (!delta.isEmpty()) {
                listener.onText(delta);
            }
            int decodeCalls = engine.graphCalls() - callsAtFirstToken[0];
            double seconds = (System.nanoTime() - firstTokenAt[0]) / 1e9;
            listener.onProgress(produced[0], decodeCalls > 0 ? (produced[0] - 1.0) / decodeCalls : 1.0,
                    seconds > 0 ? (produced[0] - 1) / seconds : 0.0);
        };
        Generator.Result result = Generator.generate(engine, prompt, options);
        history.add(new ChatFormat.Message("assistant", stream.text()));
        return result.stats;
    }

    /** The rendered conversation; the oldest turns are dropped when it would not leave room for the reply. */
    private int[] fitPrompt(int maxNewTokens) {
        int budget = Math.max(1, engine.context - Math.min(maxNewTokens, engine.context / 2));
        while (true) {
            int[] ids = tokenizer.encode(format.render(history, true), false);
            if (ids.length <= budget || history.size() <= 1) {
                if (ids.length >= engine.context) {
                    history.remove(history.size() - 1);
                    throw new IllegalArgumentException("the message has " + ids.length + " tokens but the bundle's "
                            + "context is " + engine.context + ": shorten it or export with a larger --context");
                }
                return ids;
            }
            history.remove(0); // forget the oldest turn
        }
    }

    void clear() {
        history.clear();
    }

    @Override
    public void close() {
        engine.close();
    }
}

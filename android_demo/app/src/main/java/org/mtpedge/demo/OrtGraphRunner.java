package org.mtpedge.demo;

import java.io.File;
import java.nio.FloatBuffer;
import java.nio.LongBuffer;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;

import ai.onnxruntime.OnnxTensor;
import ai.onnxruntime.OnnxValue;
import ai.onnxruntime.OrtEnvironment;
import ai.onnxruntime.OrtException;
import ai.onnxruntime.OrtSession;

import org.mtpedge.engine.BlockInputs;
import org.mtpedge.engine.BundleException;
import org.mtpedge.engine.DecoderConfig;
import org.mtpedge.engine.GraphEntry;
import org.mtpedge.engine.GraphOutput;
import org.mtpedge.engine.GraphRunner;
import org.mtpedge.engine.KvCache;
import org.mtpedge.engine.Manifest;

/**
 * ONNX Runtime Android behind the engine's GraphRunner: one session per graph of the bundle, on the CPU or on the
 * Qualcomm NPU through the QNN execution provider (HTP backend). The KV cache buffers are direct and
 * native-ordered, so they are passed to ONNX Runtime without a copy.
 */
final class OrtGraphRunner implements GraphRunner {
    private final OrtEnvironment env;
    private final Map<String, OrtSession> sessions;
    private final DecoderConfig config;
    private final String description;

    private OrtGraphRunner(OrtEnvironment env, Map<String, OrtSession> sessions, DecoderConfig config,
                           String description) {
        this.env = env;
        this.sessions = sessions;
        this.config = config;
        this.description = description;
    }

    /**
     * Sessions for every graph, created up front so that no reply pays for one. With {@code useQnn} the QNN HTP
     * backend is asked for; graphs the NPU cannot take fail here with ONNX Runtime's message.
     */
    static OrtGraphRunner open(File folder, Manifest manifest, boolean useQnn, int threads) {
        OrtEnvironment env = OrtEnvironment.getEnvironment();
        Map<String, OrtSession> sessions = new HashMap<>();
        try {
            for (GraphEntry graph : manifest.graphs) {
                OrtSession.SessionOptions options = new OrtSession.SessionOptions();
                options.setIntraOpNumThreads(threads);
                // each graph has its own thread pool: workers left spinning after one width's run slowed the
                // next width's call ~2x at 2 threads (runtime/graphs.py SESSION_DEFAULTS has the figures)
                options.addConfigEntry("session.force_spinning_stop", "1");
                if (useQnn) {
                    Map<String, String> qnn = new HashMap<>();
                    qnn.put("backend_path", "libQnnHtp.so");
                    qnn.put("htp_performance_mode", "burst");
                    qnn.put("htp_graph_finalization_optimization_mode", "3");
                    options.addQnn(qnn);
                }
                File file = new File(folder, graph.file);
                sessions.put(graph.name, env.createSession(file.getAbsolutePath(), options));
            }
        } catch (OrtException err) {
            for (OrtSession s : sessions.values()) {
                closeQuietly(s);
            }
            throw new BundleException("ONNX Runtime cannot load the bundle" + (useQnn ? " on the NPU (QNN)" : "")
                    + ": " + err.getMessage() + (useQnn ? "; untick NPU to run on the CPU, or export a QNN bundle"
                    : "; push the whole bundle folder again"), err);
        }
        String device = useQnn ? "QNN HTP" : "CPU x" + threads;
        return new OrtGraphRunner(env, sessions, manifest.config, device);
    }

    @Override
    public GraphOutput run(GraphEntry graph, float[] embeds, BlockInputs inputs, float[] ropeCos, float[] ropeSin,
                           KvCache cache) {
        OrtSession session = sessions.get(graph.name);
        int width = graph.width;
        int hidden = config.hiddenSize;
        int half = config.headDim / 2;
        long[] kvShape = {1, cache.numKvHeads, cache.context, cache.headDim};
        List<OnnxTensor> owned = new ArrayList<>();
        try {
            Map<String, OnnxTensor> feeds = new HashMap<>();
            feeds.put("inputs_embeds", own(owned, OnnxTensor.createTensor(env, FloatBuffer.wrap(embeds),
                    new long[] {1, width, hidden})));
            feeds.put("attention_bias", own(owned, OnnxTensor.createTensor(env, FloatBuffer.wrap(inputs.attentionBias),
                    new long[] {1, 1, width, inputs.context})));
            feeds.put("rope_cos", own(owned, OnnxTensor.createTensor(env, FloatBuffer.wrap(ropeCos),
                    new long[] {1, 1, width, half})));
            feeds.put("rope_sin", own(owned, OnnxTensor.createTensor(env, FloatBuffer.wrap(ropeSin),
                    new long[] {1, 1, width, half})));
            feeds.put("cache_slots", own(owned, OnnxTensor.createTensor(env, LongBuffer.wrap(inputs.cacheSlots),
                    new long[] {1, width})));
            if (inputs.loraGate != null) { // a bundle with a multi-token adapter: 1 at its mask slots
                feeds.put("lora_gate", own(owned, OnnxTensor.createTensor(env, FloatBuffer.wrap(inputs.loraGate),
                        new long[] {1, width})));
            }
            for (int l = 0; l < cache.numLayers; l++) {
                feeds.put("past_key_" + l, own(owned, OnnxTensor.createTensor(env, cache.keys(l), kvShape)));
                feeds.put("past_value_" + l, own(owned, OnnxTensor.createTensor(env, cache.values(l), kvShape)));
            }
            // present_key_l / present_value_l (the whole cache with the block's rows) are not fetched: the engine
            // commits the new rows itself, and copying C positions per layer out of every call would cost more
            Set<String> wanted = new HashSet<>();
            for (String name : session.getOutputNames()) {
                if (!name.startsWith("present_")) {
                    wanted.add(name);
                }
            }
            long started = System.nanoTime();
            try (OrtSession.Result result = session.run(feeds, wanted)) {
                double seconds = (System.nanoTime() - started) / 1e9;
                int n = inputs.realSlots;
                int vocab = config.vocabSize;
                float[] logits = new float[n * vocab];
                tensor(result, "logits").getFloatBuffer().get(logits); // rows of the real slots come first
                FloatBuffer[] newKeys = new FloatBuffer[cache.numLayers];
                FloatBuffer[] newValues = new FloatBuffer[cache.numLayers];
                for (int l = 0; l < cache.numLayers; l++) {
                    newKeys[l] = tensor(result, "new_key_" + l).getFloatBuffer(); // copies: they outlive the result
                    newValues[l] = tensor(result, "new_value_" + l).getFloatBuffer();
                }
                float[] hiddenStates = null;
                if (result.get("hidden_states").isPresent()) { // adapter graphs: the sampler head's input
                    hiddenStates = new float[n * hidden];
                    tensor(result, "hidden_states").getFloatBuffer().get(hiddenStates);
                }
                return new GraphOutput(n, vocab, logits, width, newKeys, newValues, seconds, hiddenStates);
            }
        } catch (OrtException err) {
            throw new IllegalStateException("graph " + graph.name + " failed: " + err.getMessage(), err);
        } finally {
            for (OnnxTensor t : owned) {
                t.close();
            }
        }
    }

    private static OnnxTensor own(List<OnnxTensor> owned, OnnxTensor tensor) {
        owned.add(tensor);
        return tensor;
    }

    private static OnnxTensor tensor(OrtSession.Result result, String name) {
        OnnxValue value = result.get(name).orElseThrow(() -> new IllegalStateException("the graph has no output "
                + name + ": re-export the bundle"));
        return (OnnxTensor) value;
    }

    @Override
    public String describe() {
        return description;
    }

    @Override
    public void close() {
        for (OrtSession s : sessions.values()) {
            closeQuietly(s);
        }
        sessions.clear();
    }

    private static void closeQuietly(OrtSession session) {
        try {
            session.close();
        } catch (OrtException err) {
            // closing is best effort: the process keeps running with one leaked session at worst
        }
    }
}

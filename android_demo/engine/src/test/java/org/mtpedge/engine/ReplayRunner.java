package org.mtpedge.engine;

import java.nio.FloatBuffer;
import java.util.Arrays;
import java.util.Base64;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

import org.mtpedge.engine.json.JsonValues;

/**
 * A GraphRunner that replays a decode recorded from the Python runtime on the real model: every call's inputs
 * are checked against the recording (width, n_past, positions, cache slots, attention bias, embedding rows, and the
 * cache rows committed so far), and the recorded outputs are returned.
 *
 * <p>Logits: the recorded top-k values, every other token sharing the rest of the row's probability mass (from
 * the recorded log-sum-exp), so argmax and the softmax of the top-k tokens equal the real row's. K/V: synthetic
 * rows tagged (call + 1) * 1000 + slot, so the test can see which slots the engine committed where. The LoRA gate of
 * an adapter bundle is checked (on at exactly the recorded slots, off at padding); hidden states are the recorded
 * rows (the mtp drafter's mask slots), NaN elsewhere so that reading another row poisons the drafts; a call's
 * seconds are the recorded ones where the recording has them (a cost-aware drafter's simulated device).
 */
final class ReplayRunner implements GraphRunner {
    private final List<Map<String, Object>> calls;
    private final List<Map<String, Object>> commits;
    private final int vocab;
    private int next;

    ReplayRunner(Map<String, Object> recording, int vocab) {
        this.calls = Golden.cases(recording, "calls");
        this.commits = Golden.cases(recording, "commits");
        this.vocab = vocab;
    }

    int callsReplayed() {
        return next;
    }

    int callsRecorded() {
        return calls.size();
    }

    static float tag(int call, int slot) {
        return (call + 1) * 1000 + slot;
    }

    @Override
    public GraphOutput run(GraphEntry graph, float[] embeds, BlockInputs inputs, float[] ropeCos, float[] ropeSin,
                           KvCache cache) {
        int index = next++;
        String what = "call " + index;
        Check.isTrue(index < calls.size(), "the engine made more graph calls than the recording (" + calls.size() + ")");
        Map<String, Object> call = calls.get(index);
        int width = Golden.integer(call, "width");
        int n = Golden.integer(call, "n_real");
        Check.equal(width, graph.width, what + " graph width");
        Check.equal(n, inputs.realSlots, what + " real slots");
        Check.equal(Golden.integer(call, "n_past"), cache.nPast(), what + " n_past");
        Check.equal(Golden.longs(call, "positions"), inputs.positions, what + " positions");
        Check.equal(Golden.longs(call, "cache_slots"), inputs.cacheSlots, what + " cache slots");
        Check.equal(width * cache.context, inputs.attentionBias.length, what + " bias size (W x C)");
        List<Object> runs = Golden.list(call, "bias_zero_runs");
        for (int row = 0; row < width; row++) {
            int[][] expected = Golden.runsOf(runs.get(row));
            int[][] actual = Golden.zeroRuns(inputs.attentionBias, row, inputs.context);
            Check.isTrue(Arrays.deepEquals(expected, actual), what + " bias row " + row + ": expected "
                    + Arrays.deepToString(expected) + ", got " + Arrays.deepToString(actual));
        }
        checkEmbeddings(call, embeds, n, embeds.length / width, what);
        checkGate(call, inputs, n, what);
        checkCache(cache, index, what);
        return output(call, index, n, width, cache, embeds.length / width);
    }

    private static void checkGate(Map<String, Object> call, BlockInputs inputs, int n, String what) {
        if (!call.containsKey("gate_on")) {
            Check.isTrue(inputs.loraGate == null, what + ": a LoRA gate was fed to graphs without one");
            return;
        }
        Check.isTrue(inputs.loraGate != null && inputs.loraGate.length == inputs.width, what + ": no LoRA gate of the "
                + "graph's width was fed to an adapter graph");
        float[] expected = new float[inputs.width];
        for (int slot : Golden.ints(call, "gate_on")) {
            expected[slot] = 1f;
        }
        Check.isTrue(Arrays.equals(expected, inputs.loraGate), what + ": LoRA gate " + Arrays.toString(inputs.loraGate)
                + ", Python's is on at " + call.get("gate_on") + " of " + n + " real slots");
    }

    private void checkEmbeddings(Map<String, Object> call, float[] embeds, int n, int hidden, String what) {
        double[] sums = Golden.doubles(call, "embed_sums");
        double[] sumsq = Golden.doubles(call, "embed_sumsq");
        Object checkRows = call.get("check_rows");
        List<Object> check = checkRows == null ? null : JsonValues.array(checkRows, "check_rows");
        for (int row = 0; row < n; row++) {
            if (check != null && !Boolean.TRUE.equals(check.get(row))) {
                continue; // a drafted token whose embedding row the recording does not carry
            }
            double sum = 0;
            double sq = 0;
            for (int j = 0; j < hidden; j++) {
                double v = embeds[row * hidden + j];
                sum += v;
                sq += v * v;
            }
            double scale = Math.sqrt(sumsq[row] * hidden) + 1e-6;
            Check.isTrue(Math.abs(sum - sums[row]) <= 1e-5 * scale && Math.abs(sq - sumsq[row]) <= 1e-5 * sumsq[row] + 1e-9,
                    what + " input embedding row " + row + ": sum " + sum + " / sumsq " + sq + ", Python " + sums[row]
                            + " / " + sumsq[row]);
        }
    }

    /** The cache must hold, position by position, the slots Python committed before this call. */
    private void checkCache(KvCache cache, int index, String what) {
        int position = 0;
        for (Map<String, Object> commit : commits) {
            int call = Golden.integer(commit, "call");
            if (call >= index) {
                break;
            }
            for (int slot : Golden.ints(commit, "slots")) {
                for (int layer : new int[] {0, cache.numLayers - 1}) {
                    for (int h = 0; h < cache.numKvHeads; h++) {
                        int at = (h * cache.context + position) * cache.headDim;
                        Check.equal(tag(call, slot), cache.keys(layer).get(at), what + ": cache key at position "
                                + position + " layer " + layer + " head " + h + " (call, slot) tag");
                        Check.equal(-tag(call, slot), cache.values(layer).get(at + cache.headDim - 1),
                                what + ": cache value at position " + position);
                    }
                }
                position++;
            }
        }
        Check.equal(position, cache.nPast(), what + ": positions committed so far");
    }

    private GraphOutput output(Map<String, Object> call, int index, int n, int width, KvCache cache, int hidden) {
        Map<String, Object> logits = Golden.object(call, "logits");
        List<Object> ids = Golden.list(logits, "ids");
        List<Object> values = Golden.list(logits, "values");
        double[] lse = Golden.doubles(logits, "lse");
        float[] rows = new float[n * vocab];
        for (int r = 0; r < n; r++) {
            int[] top = JsonValues.intArray(ids.get(r), "ids");
            float[] val = JsonValues.floatArray(values.get(r), "values");
            double mass = 0;
            float low = Float.MAX_VALUE;
            for (float v : val) {
                mass += Math.exp(v - lse[r]);
                low = Math.min(low, v);
            }
            double rest = 1 - mass;
            float filler = rest > 1e-12
                    ? (float) (lse[r] + Math.log(rest / (vocab - top.length)))
                    : low - 30;
            filler = Math.min(filler, Math.nextDown(low));
            Arrays.fill(rows, r * vocab, (r + 1) * vocab, filler);
            for (int i = 0; i < top.length; i++) {
                rows[r * vocab + top[i]] = val[i];
            }
        }
        int perLayer = cache.numKvHeads * width * cache.headDim;
        float[] keys = new float[perLayer];
        float[] vals = new float[perLayer];
        for (int h = 0; h < cache.numKvHeads; h++) {
            for (int s = 0; s < width; s++) {
                Arrays.fill(keys, (h * width + s) * cache.headDim, (h * width + s + 1) * cache.headDim, tag(index, s));
                Arrays.fill(vals, (h * width + s) * cache.headDim, (h * width + s + 1) * cache.headDim, -tag(index, s));
            }
        }
        FloatBuffer[] newKeys = new FloatBuffer[cache.numLayers];
        FloatBuffer[] newValues = new FloatBuffer[cache.numLayers];
        Arrays.fill(newKeys, FloatBuffer.wrap(keys));
        Arrays.fill(newValues, FloatBuffer.wrap(vals));
        double seconds = call.containsKey("seconds") ? Golden.number(call, "seconds") : 0.001;
        return new GraphOutput(n, vocab, rows, width, newKeys, newValues, seconds, hiddenStates(call, n, hidden));
    }

    private static float[] hiddenStates(Map<String, Object> call, int n, int hidden) {
        if (!call.containsKey("hidden")) {
            return null;
        }
        float[] out = new float[n * hidden];
        Arrays.fill(out, Float.NaN);
        byte[] raw = Base64.getDecoder().decode(JsonValues.stringField(call, "hidden", "call"));
        FloatBuffer floats = java.nio.ByteBuffer.wrap(raw).order(java.nio.ByteOrder.LITTLE_ENDIAN).asFloatBuffer();
        for (int row : Golden.ints(call, "hidden_rows")) {
            floats.get(out, row * hidden, hidden);
        }
        return out;
    }

    @Override
    public String describe() {
        return "replay";
    }

    @Override
    public void close() {
    }

    /** The recorded embedding rows (prompt and committed tokens) and mean row; other rows read as zeros. */
    static Embeddings sparseEmbeddings(String model, int rows, int dim) {
        Map<String, Object> recording = Golden.load("embeddings_" + model + ".json");
        int[] ids = Golden.ints(recording, "ids");
        double[] mean = Golden.doubles(recording, "mean");
        byte[] raw = Base64.getDecoder().decode(JsonValues.stringField(recording, "rows", "embeddings"));
        FloatBuffer floats = java.nio.ByteBuffer.wrap(raw).order(java.nio.ByteOrder.LITTLE_ENDIAN).asFloatBuffer();
        Map<Integer, float[]> table = new HashMap<>();
        for (int id : ids) {
            float[] row = new float[dim];
            floats.get(row);
            table.put(id, row);
        }
        return new Embeddings() {
            @Override
            public int rows() {
                return rows;
            }

            @Override
            public int dim() {
                return dim;
            }

            @Override
            public double[] columnMean() {
                return mean.clone();
            }

            @Override
            public void copyRow(int token, float[] out, int offset) {
                float[] row = table.get(token);
                if (row == null) {
                    Arrays.fill(out, offset, offset + dim, 0f);
                } else {
                    System.arraycopy(row, 0, out, offset, dim);
                }
            }
        };
    }
}

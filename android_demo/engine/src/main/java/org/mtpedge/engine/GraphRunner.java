package org.mtpedge.engine;

/**
 * Runs one static graph of the bundle: the small interface that keeps ONNX Runtime (CPU, QNN, or a recorded
 * replay in the tests) out of the engine.
 *
 * <p>Inputs follow {@code mtpedge.runtime.contract} (bundle version 2): inputs_embeds (1, W, hidden),
 * attention_bias (1, 1, W, C), rope_cos / rope_sin (1, 1, W, head_dim/2), cache_slots (1, W) int64 (the cache
 * column where the graph places each row's new K/V in its own copy of the cache before attending; the host
 * buffers are not written), lora_gate (1, W) on adapter bundles, past_key_l / past_value_l = the whole cache
 * buffers. Outputs: logits (1, W, vocab) of which the first {@code inputs.realSlots} rows are returned, and
 * new_key_l / new_value_l (1, kv_heads, W, head_dim), which the host commits.
 */
public interface GraphRunner extends AutoCloseable {
    GraphOutput run(GraphEntry graph, float[] embeds, BlockInputs inputs, float[] ropeCos, float[] ropeSin,
                    KvCache cache);

    /** What executes the graphs, for the stats line (e.g. "CPU", "QNN HTP"). */
    String describe();

    @Override
    void close();
}

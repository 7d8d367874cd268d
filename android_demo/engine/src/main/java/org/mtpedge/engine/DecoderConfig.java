package org.mtpedge.engine;

import java.util.Collections;
import java.util.Map;

import org.mtpedge.engine.json.JsonValues;

/** The decoder dimensions the engine needs from the manifest's "config". */
public final class DecoderConfig {
    public final String architecture;
    public final int vocabSize;
    public final int hiddenSize;
    public final int numLayers;
    public final int numHeads;
    public final int numKvHeads;
    public final int headDim;
    public final RopeConfig rope;

    public DecoderConfig(String architecture, int vocabSize, int hiddenSize, int numLayers, int numHeads,
                         int numKvHeads, int headDim, RopeConfig rope) {
        if (headDim % 2 != 0) {
            throw new BundleException("head_dim " + headDim + " must be even for rotary embeddings");
        }
        this.architecture = architecture;
        this.vocabSize = vocabSize;
        this.hiddenSize = hiddenSize;
        this.numLayers = numLayers;
        this.numHeads = numHeads;
        this.numKvHeads = numKvHeads;
        this.headDim = headDim;
        this.rope = rope;
    }

    public static DecoderConfig fromJson(Map<String, Object> map) {
        String where = "manifest.config";
        Object rope = map.get("rope");
        return new DecoderConfig(
                JsonValues.stringField(map, "architecture", where),
                JsonValues.intField(map, "vocab_size", where),
                JsonValues.intField(map, "hidden_size", where),
                JsonValues.intField(map, "num_layers", where),
                JsonValues.intField(map, "num_heads", where),
                JsonValues.intField(map, "num_kv_heads", where),
                JsonValues.intField(map, "head_dim", where),
                RopeConfig.fromJson(rope == null ? Collections.<String, Object>emptyMap() : JsonValues.object(rope, where + ".rope")));
    }
}

package org.mtpedge.engine;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.FloatBuffer;

/**
 * The host-owned, fixed-size KV cache: per layer one (1, kv_heads, C, head_dim) buffer plus {@code nPast};
 * port of {@code mtpedge.runtime.kv_cache.KVCache}.
 *
 * <p>Buffers are direct and native-ordered so that ONNX Runtime wraps them without a copy. The graphs read the
 * buffers whole and return only the new rows (1, kv_heads, W, head_dim); the host commits the rows of the
 * accepted slots by gathering them into [nPast, nPast + a).
 */
public final class KvCache {
    public final int numLayers;
    public final int numKvHeads;
    public final int context;
    public final int headDim;
    private final FloatBuffer[] keys;
    private final FloatBuffer[] values;
    private int nPast;

    public KvCache(int numLayers, int numKvHeads, int context, int headDim) {
        this.numLayers = numLayers;
        this.numKvHeads = numKvHeads;
        this.context = context;
        this.headDim = headDim;
        this.keys = new FloatBuffer[numLayers];
        this.values = new FloatBuffer[numLayers];
        int floats = numKvHeads * context * headDim;
        for (int l = 0; l < numLayers; l++) {
            keys[l] = ByteBuffer.allocateDirect(floats * 4).order(ByteOrder.nativeOrder()).asFloatBuffer();
            values[l] = ByteBuffer.allocateDirect(floats * 4).order(ByteOrder.nativeOrder()).asFloatBuffer();
        }
    }

    public int nPast() {
        return nPast;
    }

    public int free() {
        return context - nPast;
    }

    /** Stale rows beyond nPast are masked out by the attention bias, so zeroing is not needed. */
    public void reset() {
        nPast = 0;
    }

    /** Pretend {@code n} positions are filled (a cost measurement runs the graphs at the full context). */
    void setNPast(int n) {
        if (n < 0 || n > context) {
            throw new IllegalArgumentException("n_past " + n + " is outside the context " + context);
        }
        nPast = n;
    }

    /** Forget everything after the first {@code n} positions (e.g. to reuse a shared chat prefix). */
    public void truncate(int n) {
        if (n < 0 || n > nPast) {
            throw new IllegalArgumentException("cannot truncate to " + n + ": the cache holds " + nPast + " positions");
        }
        nPast = n;
    }

    /** The whole buffer of one layer, (1, kv_heads, C, head_dim), position 0 (a duplicate view: no copy). */
    public FloatBuffer keys(int layer) {
        return (FloatBuffer) keys[layer].duplicate().rewind();
    }

    public FloatBuffer values(int layer) {
        return (FloatBuffer) values[layer].duplicate().rewind();
    }

    public void ensureRoom(int needed) {
        if (needed > free()) {
            throw new ContextOverflowException("the sequence needs " + (nPast + needed)
                    + " positions but the bundle's context is " + context
                    + ": shorten the prompt or max_new_tokens, or export with a larger --context");
        }
    }

    /**
     * Append the K/V rows of block slots {@code slots} (in order) at [nPast, nPast + slots.length).
     * newKeys[l] / newValues[l] are (1, kv_heads, width, head_dim), row-major.
     */
    public void commitAcceptedKv(FloatBuffer[] newKeys, FloatBuffer[] newValues, int width, int[] slots) {
        if (newKeys.length != numLayers || newValues.length != numLayers) {
            throw new IllegalArgumentException("expected new K/V for " + numLayers + " layers, got " + newKeys.length
                    + "/" + newValues.length);
        }
        ensureRoom(slots.length);
        for (int l = 0; l < numLayers; l++) {
            gather(newKeys[l], keys[l], width, slots);
            gather(newValues[l], values[l], width, slots);
        }
        nPast += slots.length;
    }

    private void gather(FloatBuffer source, FloatBuffer target, int width, int[] slots) {
        float[] row = new float[headDim];
        for (int h = 0; h < numKvHeads; h++) {
            for (int i = 0; i < slots.length; i++) {
                if (slots[i] < 0 || slots[i] >= width) {
                    throw new IllegalArgumentException("slot " + slots[i] + " is outside the block of width " + width);
                }
                source.position((h * width + slots[i]) * headDim);
                source.get(row);
                target.position((h * context + nPast + i) * headDim);
                target.put(row);
            }
        }
        source.rewind();
        target.rewind();
    }
}

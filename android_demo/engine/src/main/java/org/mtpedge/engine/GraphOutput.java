package org.mtpedge.engine;

import java.nio.FloatBuffer;
import java.util.Arrays;

/** What one graph call returns: logits of the real slots and the new K/V rows of every slot of the width. */
public final class GraphOutput {
    public final int rows;
    public final int vocab;
    /** Row-major (rows, vocab): the real slots only. */
    public final float[] logits;
    public final int width;
    /** Per layer (1, kv_heads, width, head_dim), padding rows included. */
    public final FloatBuffer[] newKeys;
    public final FloatBuffer[] newValues;
    /** Time inside the graph call. */
    public final double seconds;

    public GraphOutput(int rows, int vocab, float[] logits, int width, FloatBuffer[] newKeys, FloatBuffer[] newValues,
                       double seconds) {
        if (logits.length != rows * vocab) {
            throw new IllegalArgumentException("logits hold " + logits.length + " values, expected " + rows + " x "
                    + vocab);
        }
        this.rows = rows;
        this.vocab = vocab;
        this.logits = logits;
        this.width = width;
        this.newKeys = newKeys;
        this.newValues = newValues;
        this.seconds = seconds;
    }

    public float[] logitsRow(int row) {
        return Arrays.copyOfRange(logits, row * vocab, (row + 1) * vocab);
    }
}

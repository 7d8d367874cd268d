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
    /**
     * Row-major (rows, hidden) final-normed hidden states of the real slots (the sampler head's input): graphs of
     * a bundle with a multi-token adapter only, else null.
     */
    public final float[] hidden;
    /**
     * Rows [0, plainRows) are computed bit for bit as plain decoding computes their tokens: the block's leading
     * chain inside the context (set by {@link Engine#runBlock}); the decode loop trusts no other row's logits.
     */
    int plainRows = Integer.MAX_VALUE;

    public GraphOutput(int rows, int vocab, float[] logits, int width, FloatBuffer[] newKeys, FloatBuffer[] newValues,
                       double seconds) {
        this(rows, vocab, logits, width, newKeys, newValues, seconds, null);
    }

    public GraphOutput(int rows, int vocab, float[] logits, int width, FloatBuffer[] newKeys, FloatBuffer[] newValues,
                       double seconds, float[] hidden) {
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
        if (hidden != null && (rows == 0 || hidden.length % rows != 0)) {
            throw new IllegalArgumentException("hidden states of " + hidden.length + " values do not split into " + rows
                    + " rows");
        }
        this.hidden = hidden;
    }

    public int plainRows() {
        return plainRows;
    }

    public float[] logitsRow(int row) {
        return Arrays.copyOfRange(logits, row * vocab, (row + 1) * vocab);
    }

    /**
     * The rows start.. only: what a drafter whose tree begins at row {@code start} reads (its logits and hidden
     * states; the K/V buffers stay the whole call's, which only the loop's commit reads).
     */
    public GraphOutput rowsFrom(int start) {
        if (start == 0) {
            return this;
        }
        float[] tail = Arrays.copyOfRange(logits, start * vocab, logits.length);
        float[] hiddenTail = hidden == null ? null
                : Arrays.copyOfRange(hidden, start * (hidden.length / rows), hidden.length);
        GraphOutput view = new GraphOutput(rows - start, vocab, tail, width, newKeys, newValues, seconds, hiddenTail);
        view.plainRows = Math.max(0, plainRows - start);
        return view;
    }

    /** Row {@code row} of the hidden states; the graph must have returned them (an adapter bundle). */
    public float[] hiddenRow(int row) {
        if (hidden == null) {
            throw new IllegalStateException("this graph returns no hidden states: the bundle has no multi-token adapter");
        }
        int dim = hidden.length / rows;
        return Arrays.copyOfRange(hidden, row * dim, (row + 1) * dim);
    }
}

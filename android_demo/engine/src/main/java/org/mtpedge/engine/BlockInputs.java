package org.mtpedge.engine;

/**
 * The inputs of one graph call over n real slots padded to the graph's width W; port of the input-building
 * part of {@code mtpedge.runtime.engine.Engine.run_block} and of {@code attention_bias.block_inputs} (graph
 * contract version 2).
 *
 * <ul>
 *   <li>positions (W): n_past + depth for real slots, n_past for padding;</li>
 *   <li>cache slots (W): the cache column where the graph places each row's new K/V (in its own copy of the
 *       cache) before attending: n_past + i for real slot i (its index, not its depth), the first free column
 *       n_past + n for every padding row;</li>
 *   <li>attention bias (1, 1, W, C), additive over the C cache columns: a real row sees the committed cache
 *       [0, n_past) and the columns of its tree-visible block slots; a padding row sees only its own column
 *       n_past + n, so its softmax stays finite.</li>
 * </ul>
 *
 * <pre>
 *   tree -1, 0, 0 at n_past 4, W = 4, C = 10      columns 0..9     cache_slots
 *   row 0 (root)                                  ●●●●●○○○○○       4
 *   row 1 (child of 0)                            ●●●●●●○○○○       5
 *   row 2 (child of 0)                            ●●●●●○●○○○       6
 *   row 3 (padding)                               ○○○○○○○●○○       7
 * </pre>
 *
 * With the keys at the columns plain decoding will later read them from, a chain's rows sum their attention in
 * the same order as plain decoding's calls (the reason for the contract; see {@code mtpedge.runtime.contract}).
 *
 * <p>At the context's end a block may be too long for its columns (and, with padding, one shared column more):
 * then only its first {@link #rowsInContext} rows get columns of their own, all but the last free column, and the
 * rest share that one with the padding rows, seeing only it; their outputs mean nothing (the loop reads only
 * {@link GraphOutput#plainRows()}, which excludes them), as in the Python engine.
 */
public final class BlockInputs {
    public final int width;
    public final int context;
    public final int realSlots;
    /** The first rows of the block that have a cache column of their own (= realSlots unless at the context's end). */
    public final int rowsInContext;
    public final long[] positions;
    /** cache_slots (1, W), int64. */
    public final long[] cacheSlots;
    /** Row-major (W, C). */
    public final float[] attentionBias;
    /**
     * lora_gate (1, W) of a bundle exported with a multi-token adapter (1 = a mask slot, the gated LoRA on; 0 at
     * token nodes and padding); null when the graphs have no such input.
     */
    public final float[] loraGate;

    private BlockInputs(int width, int context, int realSlots, int rowsInContext, long[] positions, long[] cacheSlots,
                        float[] attentionBias, float[] loraGate) {
        this.width = width;
        this.context = context;
        this.realSlots = realSlots;
        this.rowsInContext = rowsInContext;
        this.positions = positions;
        this.cacheSlots = cacheSlots;
        this.attentionBias = attentionBias;
        this.loraGate = loraGate;
    }

    public static BlockInputs build(int[] parents, int nPast, int width, int context, float maskValue) {
        return build(TreeLayout.of(parents), nPast, width, context, maskValue, null);
    }

    /**
     * How many of a block's first rows get a cache column of their own: all n when they and (with padding) one
     * shared column fit the context; else all but the last free column, which the rest share.
     */
    public static int rowsWithColumns(int n, int nPast, int width, int context) {
        int room = context - nPast;
        return n + (n < width ? 1 : 0) <= room ? n : Math.min(n, room - 1);
    }

    /**
     * The inputs of a block laid out as {@code layout} (a bundle template's, or one computed from parents);
     * {@code gate}: the LoRA gate of the n real slots, or null for graphs without a lora_gate input.
     *
     * @throws ContextOverflowException when not even the block's first row gets a cache column of its own
     */
    public static BlockInputs build(TreeLayout layout, int nPast, int width, int context, float maskValue,
                                    float[] gate) {
        int n = layout.depth.length;
        if (n > width) {
            throw new IllegalArgumentException("a block of " + n + " slots does not fit a graph of width " + width);
        }
        int inside = rowsWithColumns(n, nPast, width, context);
        if (inside < 1) {
            throw new ContextOverflowException("a block of " + n + " slots at position " + nPast + " in a graph of "
                    + "width " + width + " finds no free cache column" + (n < width ? " for its padding" : "")
                    + " (context " + context + "): the last position needs a graph exactly as wide as the block, "
                    + "or export with a larger --context");
        }
        int pad = nPast + inside; // the column rows [inside, W) share (none of them when inside = W)
        long[] positions = new long[width];
        long[] slots = new long[width];
        for (int i = 0; i < width; i++) {
            positions[i] = nPast + (i < n ? layout.depth[i] : 0);
            slots[i] = i < inside ? nPast + i : pad;
        }
        float[] bias = new float[width * context];
        java.util.Arrays.fill(bias, maskValue);
        for (int i = 0; i < inside; i++) {
            int row = i * context;
            java.util.Arrays.fill(bias, row, row + nPast, 0f);
            for (int j = 0; j < inside; j++) {
                if (layout.visible[i][j]) {
                    bias[row + nPast + j] = 0f;
                }
            }
        }
        for (int i = inside; i < width; i++) {
            bias[i * context + pad] = 0f;
        }
        float[] paddedGate = gate == null ? null : java.util.Arrays.copyOf(gate, width);
        return new BlockInputs(width, context, n, inside, positions, slots, bias, paddedGate);
    }
}

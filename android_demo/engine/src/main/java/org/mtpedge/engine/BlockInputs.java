package org.mtpedge.engine;

/**
 * The inputs of one graph call over n real slots padded to the graph's width W; port of the input-building
 * part of {@code mtpedge.runtime.engine.Engine.run_block}.
 *
 * <ul>
 *   <li>positions (W): n_past + depth for real slots, n_past for padding;</li>
 *   <li>attention bias (1, 1, W, C + W), additive: a real row sees the committed cache [0, n_past) and its
 *       tree-visible block slots; a padding row sees only itself, so its softmax stays finite.</li>
 * </ul>
 */
public final class BlockInputs {
    public final int width;
    public final int context;
    public final int realSlots;
    public final long[] positions;
    /** Row-major (W, C + W). */
    public final float[] attentionBias;
    /**
     * lora_gate (1, W) of a bundle exported with a multi-token adapter (1 = a mask slot, the gated LoRA on; 0 at
     * token nodes and padding); null when the graphs have no such input.
     */
    public final float[] loraGate;

    private BlockInputs(int width, int context, int realSlots, long[] positions, float[] attentionBias,
                        float[] loraGate) {
        this.width = width;
        this.context = context;
        this.realSlots = realSlots;
        this.positions = positions;
        this.attentionBias = attentionBias;
        this.loraGate = loraGate;
    }

    public static BlockInputs build(int[] parents, int nPast, int width, int context, float maskValue) {
        return build(TreeLayout.of(parents), nPast, width, context, maskValue, null);
    }

    /**
     * The inputs of a block laid out as {@code layout} (a bundle template's, or one computed from parents);
     * {@code gate}: the LoRA gate of the n real slots, or null for graphs without a lora_gate input.
     */
    public static BlockInputs build(TreeLayout layout, int nPast, int width, int context, float maskValue,
                                    float[] gate) {
        int n = layout.depth.length;
        if (n > width) {
            throw new IllegalArgumentException("a block of " + n + " slots does not fit a graph of width " + width);
        }
        if (nPast > context) {
            throw new ContextOverflowException("n_past " + nPast + " is beyond the bundle's context " + context);
        }
        // A block may reach past the context's end (a tree near the limit): its K/V are never stored there, since
        // the loop commits only as many accepted slots as there are free positions (as the Python engine does).
        long[] positions = new long[width];
        for (int i = 0; i < width; i++) {
            positions[i] = nPast + (i < n ? layout.depth[i] : 0);
        }
        int columns = context + width;
        float[] bias = new float[width * columns];
        java.util.Arrays.fill(bias, maskValue);
        for (int i = 0; i < n; i++) {
            int row = i * columns;
            java.util.Arrays.fill(bias, row, row + nPast, 0f);
            for (int j = 0; j < n; j++) {
                if (layout.visible[i][j]) {
                    bias[row + context + j] = 0f;
                }
            }
        }
        for (int i = n; i < width; i++) {
            bias[i * columns + context + i] = 0f;
        }
        float[] paddedGate = gate == null ? null : java.util.Arrays.copyOf(gate, width);
        return new BlockInputs(width, context, n, positions, bias, paddedGate);
    }
}

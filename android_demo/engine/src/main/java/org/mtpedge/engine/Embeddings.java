package org.mtpedge.engine;

/** The input embedding table (vocab, hidden), looked up on the host; see {@link EmbeddingTable}. */
public interface Embeddings {
    int rows();

    int dim();

    /** Copy row {@code token} into out[offset, offset + dim). */
    void copyRow(int token, float[] out, int offset);

    default float[] row(int token) {
        float[] out = new float[dim()];
        copyRow(token, out, 0);
        return out;
    }
}

package org.mtpedge.engine;

/** The input embedding table (vocab, hidden), looked up on the host; see {@link EmbeddingTable}. */
public interface Embeddings {
    int rows();

    int dim();

    /** Copy row {@code token} into out[offset, offset + dim). */
    void copyRow(int token, float[] out, int offset);

    /** Per-dimension mean over all rows, in double (ESP's "mean" mask init); implementations may cache it. */
    default double[] columnMean() {
        int d = dim();
        double[] sum = new double[d];
        float[] row = new float[d];
        for (int id = 0; id < rows(); id++) {
            copyRow(id, row, 0);
            for (int j = 0; j < d; j++) {
                sum[j] += row[j];
            }
        }
        for (int j = 0; j < d; j++) {
            sum[j] /= rows();
        }
        return sum;
    }

    default float[] row(int token) {
        float[] out = new float[dim()];
        copyRow(token, out, 0);
        return out;
    }
}

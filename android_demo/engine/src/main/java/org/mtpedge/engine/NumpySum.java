package org.mtpedge.engine;

/**
 * numpy's float64 sum, summed in numpy's order (pairwise, eight running sums per block of up to 128 values), so
 * that an estimate built from sums rounds exactly as the Python runtime's does: the tree sizing compares such
 * estimates, and a last-bit difference could flip a tie.
 */
public final class NumpySum {
    private static final int BLOCK = 128;

    private NumpySum() {
    }

    public static double sum(double[] values) {
        return sum(values, 0, values.length);
    }

    /** The sum of values[from, to), as numpy's {@code values[from:to].sum()}. */
    public static double sum(double[] values, int from, int to) {
        int n = to - from;
        if (n < 8) {
            double res = 0.0;
            for (int i = from; i < to; i++) {
                res += values[i];
            }
            return res;
        }
        if (n <= BLOCK) {
            double[] r = new double[8];
            System.arraycopy(values, from, r, 0, 8);
            int i = 8;
            for (; i < n - n % 8; i += 8) {
                for (int j = 0; j < 8; j++) {
                    r[j] += values[from + i + j];
                }
            }
            double res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
            for (; i < n; i++) {
                res += values[from + i];
            }
            return res;
        }
        int half = n / 2;
        half -= half % 8;
        return sum(values, from, from + half) + sum(values, from + half, to);
    }
}

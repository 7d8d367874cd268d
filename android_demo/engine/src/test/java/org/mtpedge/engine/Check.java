package org.mtpedge.engine;

import java.util.Arrays;
import java.util.Objects;

/** Assertions for the golden tests; each failure message names the case and the first difference. */
final class Check {
    private Check() {
    }

    static void fail(String message) {
        throw new AssertionError(message);
    }

    static void isTrue(boolean condition, String message) {
        if (!condition) {
            fail(message);
        }
    }

    static void equal(Object expected, Object actual, String what) {
        if (!Objects.equals(expected, actual)) {
            fail(what + ": expected " + expected + ", got " + actual);
        }
    }

    static void equal(long expected, long actual, String what) {
        if (expected != actual) {
            fail(what + ": expected " + expected + ", got " + actual);
        }
    }

    static void equal(int[] expected, int[] actual, String what) {
        if (!Arrays.equals(expected, actual)) {
            fail(what + ": expected " + Arrays.toString(expected) + ", got " + Arrays.toString(actual));
        }
    }

    static void equal(long[] expected, long[] actual, String what) {
        if (!Arrays.equals(expected, actual)) {
            fail(what + ": expected " + Arrays.toString(expected) + ", got " + Arrays.toString(actual));
        }
    }

    /** Bitwise-equal floats (the golden files hold float32 values exactly). */
    static void exact(float[] expected, float[] actual, String what) {
        if (expected.length != actual.length) {
            fail(what + ": expected " + expected.length + " values, got " + actual.length);
        }
        for (int i = 0; i < expected.length; i++) {
            if (Float.floatToIntBits(expected[i]) != Float.floatToIntBits(actual[i])) {
                fail(what + "[" + i + "]: expected " + expected[i] + ", got " + actual[i]);
            }
        }
    }

    static void close(double expected, Double actual, double tolerance, String what) {
        isTrue(actual != null && Math.abs(expected - actual) <= tolerance, what + ": expected " + expected + ", got "
                + actual);
    }

    static void close(float[] expected, float[] actual, double tolerance, String what) {
        if (expected.length != actual.length) {
            fail(what + ": expected " + expected.length + " values, got " + actual.length);
        }
        for (int i = 0; i < expected.length; i++) {
            if (Math.abs(expected[i] - actual[i]) > tolerance) {
                fail(what + "[" + i + "]: expected " + expected[i] + ", got " + actual[i] + " (tolerance " + tolerance
                        + ")");
            }
        }
    }

    static void close(double[] expected, double[] actual, double tolerance, String what) {
        if (expected.length != actual.length) {
            fail(what + ": expected " + expected.length + " values, got " + actual.length);
        }
        for (int i = 0; i < expected.length; i++) {
            if (Math.abs(expected[i] - actual[i]) > tolerance) {
                fail(what + "[" + i + "]: expected " + expected[i] + ", got " + actual[i] + " (tolerance " + tolerance
                        + ")");
            }
        }
    }

    static <T extends Throwable> T throwsError(Class<T> type, Runnable body, String what) {
        try {
            body.run();
        } catch (Throwable err) {
            if (type.isInstance(err)) {
                return type.cast(err);
            }
            fail(what + ": expected " + type.getSimpleName() + ", got " + err);
        }
        fail(what + ": expected " + type.getSimpleName() + ", nothing was thrown");
        return null;
    }
}

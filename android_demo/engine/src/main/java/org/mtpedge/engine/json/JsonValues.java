package org.mtpedge.engine.json;

import java.util.List;
import java.util.Map;

/** Typed access to parsed JSON, with errors that name the missing or mistyped field. */
public final class JsonValues {
    private JsonValues() {
    }

    @SuppressWarnings("unchecked")
    public static Map<String, Object> object(Object value, String what) {
        if (!(value instanceof Map)) {
            throw new JsonException(what + " must be a JSON object, got " + describe(value));
        }
        return (Map<String, Object>) value;
    }

    @SuppressWarnings("unchecked")
    public static List<Object> array(Object value, String what) {
        if (!(value instanceof List)) {
            throw new JsonException(what + " must be a JSON array, got " + describe(value));
        }
        return (List<Object>) value;
    }

    public static Object field(Map<String, Object> map, String key, String where) {
        if (!map.containsKey(key)) {
            throw new JsonException(where + " has no field '" + key + "'");
        }
        return map.get(key);
    }

    public static Map<String, Object> objectField(Map<String, Object> map, String key, String where) {
        return object(field(map, key, where), where + "." + key);
    }

    public static List<Object> arrayField(Map<String, Object> map, String key, String where) {
        return array(field(map, key, where), where + "." + key);
    }

    public static String stringField(Map<String, Object> map, String key, String where) {
        Object value = field(map, key, where);
        if (!(value instanceof String)) {
            throw new JsonException(where + "." + key + " must be a string, got " + describe(value));
        }
        return (String) value;
    }

    public static String optString(Map<String, Object> map, String key) {
        Object value = map.get(key);
        return value instanceof String ? (String) value : null;
    }

    public static long longValue(Object value, String what) {
        if (value instanceof Long) {
            return (Long) value;
        }
        if (value instanceof Double && ((Double) value) == Math.rint((Double) value)) {
            return (long) (double) (Double) value;
        }
        throw new JsonException(what + " must be an integer, got " + describe(value));
    }

    public static int intField(Map<String, Object> map, String key, String where) {
        return Math.toIntExact(longValue(field(map, key, where), where + "." + key));
    }

    public static double doubleValue(Object value, String what) {
        if (value instanceof Number) {
            return ((Number) value).doubleValue();
        }
        throw new JsonException(what + " must be a number, got " + describe(value));
    }

    public static double doubleField(Map<String, Object> map, String key, String where) {
        return doubleValue(field(map, key, where), where + "." + key);
    }

    public static boolean boolField(Map<String, Object> map, String key, boolean fallback) {
        Object value = map.get(key);
        return value instanceof Boolean ? (Boolean) value : fallback;
    }

    public static int[] intArray(Object value, String what) {
        List<Object> list = array(value, what);
        int[] out = new int[list.size()];
        for (int i = 0; i < out.length; i++) {
            out[i] = Math.toIntExact(longValue(list.get(i), what + "[" + i + "]"));
        }
        return out;
    }

    public static long[] longArray(Object value, String what) {
        List<Object> list = array(value, what);
        long[] out = new long[list.size()];
        for (int i = 0; i < out.length; i++) {
            out[i] = longValue(list.get(i), what + "[" + i + "]");
        }
        return out;
    }

    public static float[] floatArray(Object value, String what) {
        List<Object> list = array(value, what);
        float[] out = new float[list.size()];
        for (int i = 0; i < out.length; i++) {
            out[i] = (float) doubleValue(list.get(i), what + "[" + i + "]");
        }
        return out;
    }

    public static double[] doubleArray(Object value, String what) {
        List<Object> list = array(value, what);
        double[] out = new double[list.size()];
        for (int i = 0; i < out.length; i++) {
            out[i] = doubleValue(list.get(i), what + "[" + i + "]");
        }
        return out;
    }

    private static String describe(Object value) {
        return value == null ? "null" : value.getClass().getSimpleName() + " " + truncate(String.valueOf(value));
    }

    private static String truncate(String s) {
        return s.length() > 40 ? s.substring(0, 40) + "..." : s;
    }
}

package org.mtpedge.engine;

import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.Map;

import org.mtpedge.engine.json.Json;
import org.mtpedge.engine.json.JsonValues;

/** Reads the golden files written by android_demo/tools/make_golden.py (on the classpath under /golden/). */
final class Golden {
    private Golden() {
    }

    static String text(String name) {
        try (InputStream in = Golden.class.getResourceAsStream("/golden/" + name)) {
            if (in == null) {
                throw new AssertionError("golden file " + name + " is missing: run python android_demo/tools/"
                        + "make_golden.py");
            }
            return new String(in.readAllBytes(), StandardCharsets.UTF_8);
        } catch (IOException err) {
            throw new AssertionError("cannot read golden file " + name + ": " + err);
        }
    }

    /** A folder of golden files (e.g. a bundle's adapter files) as a path, or null if there is none. */
    static java.nio.file.Path folder(String name) {
        java.net.URL url = Golden.class.getResource("/golden/" + name);
        if (url == null) {
            return null;
        }
        try {
            return java.nio.file.Paths.get(url.toURI());
        } catch (java.net.URISyntaxException err) {
            throw new AssertionError("golden folder " + name + ": " + err);
        }
    }

    static boolean exists(String name) {
        return Golden.class.getResource("/golden/" + name) != null;
    }

    static Map<String, Object> load(String name) {
        return JsonValues.object(Json.parse(text(name)), name);
    }

    static List<Map<String, Object>> cases(Map<String, Object> file, String key) {
        @SuppressWarnings("unchecked")
        List<Map<String, Object>> list = (List<Map<String, Object>>) (List<?>) JsonValues.arrayField(file, key, "golden");
        Check.isTrue(!list.isEmpty(), "golden file has no '" + key + "' cases");
        return list;
    }

    static int[] ints(Map<String, Object> map, String key) {
        return JsonValues.intArray(JsonValues.field(map, key, "case"), key);
    }

    static long[] longs(Map<String, Object> map, String key) {
        return JsonValues.longArray(JsonValues.field(map, key, "case"), key);
    }

    static float[] floats(Map<String, Object> map, String key) {
        return JsonValues.floatArray(JsonValues.field(map, key, "case"), key);
    }

    static double[] doubles(Map<String, Object> map, String key) {
        return JsonValues.doubleArray(JsonValues.field(map, key, "case"), key);
    }

    static int integer(Map<String, Object> map, String key) {
        return JsonValues.intField(map, key, "case");
    }

    static double number(Map<String, Object> map, String key) {
        return JsonValues.doubleField(map, key, "case");
    }

    static Map<String, Object> object(Map<String, Object> map, String key) {
        return JsonValues.objectField(map, key, "case");
    }

    static List<Object> list(Map<String, Object> map, String key) {
        return JsonValues.arrayField(map, key, "case");
    }

    /** Zero runs [start, end) of a bias row, the compact form the golden files use. */
    static int[][] zeroRuns(float[] bias, int row, int columns) {
        java.util.List<int[]> runs = new java.util.ArrayList<>();
        int start = -1;
        for (int j = 0; j <= columns; j++) {
            boolean zero = j < columns && bias[row * columns + j] == 0f;
            if (zero && start < 0) {
                start = j;
            } else if (!zero && start >= 0) {
                runs.add(new int[] {start, j});
                start = -1;
            }
        }
        return runs.toArray(new int[0][]);
    }

    static int[][] runsOf(Object json) {
        List<Object> list = JsonValues.array(json, "runs");
        int[][] out = new int[list.size()][];
        for (int i = 0; i < out.length; i++) {
            out[i] = JsonValues.intArray(list.get(i), "run");
        }
        return out;
    }
}

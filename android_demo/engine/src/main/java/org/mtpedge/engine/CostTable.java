package org.mtpedge.engine;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

import org.mtpedge.engine.json.Json;
import org.mtpedge.engine.json.JsonException;
import org.mtpedge.engine.json.JsonValues;

/**
 * What one graph call of each decode width costs on the device at hand: the table cost-aware draft trees read;
 * port of {@code mtpedge.runtime.cost_table.CostTable}. It belongs to one bundle (its source weights) and one
 * device, and comes from an on-device profile ({@code mtpedge hub profile --cost-file}, pushed beside the bundle)
 * or is flat (every width costs the same: the NPU assumption). File form (JSON):
 *
 * <pre>
 * {"format": "mtpedge-cost-table", "version": 1,
 *  "bundle": {"model_name": "...", "source_sha256": "...", "context": 1024},
 *  "device": "...", "origin": "measured" | "flat" | "aihub-profile" | ..., "created": "...",
 *  "seconds": {"1": 0.0112, "16": 0.0201}}
 * </pre>
 */
public final class CostTable {
    public static final String FORMAT = "mtpedge-cost-table";
    public static final int VERSION = 1;

    /** Graph width -> seconds per call, narrowest first. */
    public final Map<Integer, Double> seconds;
    public final String modelName;
    public final String sourceSha256;
    public final int context;
    public final String device;
    public final String origin;

    public CostTable(Map<Integer, Double> seconds, String modelName, String sourceSha256, int context, String device,
                     String origin) {
        if (seconds.isEmpty()) {
            throw new CostTableException("a cost table needs at least one width");
        }
        Map<Integer, Double> sorted = new TreeMap<>();
        List<String> bad = new ArrayList<>();
        for (Map.Entry<Integer, Double> e : seconds.entrySet()) {
            if (e.getKey() < 1 || !(e.getValue() > 0) || e.getValue().isInfinite()) {
                bad.add(e.getKey() + "=" + e.getValue());
            }
            sorted.put(e.getKey(), e.getValue());
        }
        if (!bad.isEmpty()) {
            throw new CostTableException("cost table widths must be >= 1 and seconds > 0, got " + bad);
        }
        this.seconds = Collections.unmodifiableMap(sorted);
        this.modelName = modelName;
        this.sourceSha256 = sourceSha256;
        this.context = context;
        this.device = device;
        this.origin = origin;
    }

    /** The same table (bundle, device, origin) with other seconds: a run's corrections ({@link CallCosts}). */
    public CostTable withSeconds(Map<Integer, Double> corrected) {
        return new CostTable(corrected, modelName, sourceSha256, context, device, origin);
    }

    /** A cost table that cannot be read or does not belong to the bundle; the message names the fix. */
    public static final class CostTableException extends IllegalArgumentException {
        public CostTableException(String message) {
            super(message);
        }
    }

    /** Every decode width of the bundle costs the same: trees grow to the widest graph. */
    public static CostTable flat(Manifest manifest) {
        Map<Integer, Double> seconds = new TreeMap<>();
        for (int w : manifest.decodeWidths()) {
            seconds.put(w, 1.0);
        }
        return new CostTable(seconds, manifest.modelName, manifest.sourceSha256, manifest.context,
                "flat: every width costs the same (NPU assumption)", "flat");
    }

    /** Seconds of a call of the narrowest listed width that holds {@code width} slots. */
    public double cost(int width) {
        for (Map.Entry<Integer, Double> e : seconds.entrySet()) {
            if (e.getKey() >= width) {
                return e.getValue();
            }
        }
        throw new CostTableException("no width in the cost table holds " + width + " slots (widths "
                + seconds.keySet() + ")");
    }

    /** Null if the table fits the bundle, else what is wrong (for a message and a fallback). */
    public String check(Manifest manifest) {
        if (!sourceSha256.equals(manifest.sourceSha256)) {
            return "the cost table was made for " + modelName + " (sha256 " + head(sourceSha256) + "), not for this "
                    + "bundle's " + manifest.modelName + " (sha256 " + head(manifest.sourceSha256) + ")";
        }
        List<Integer> missing = new ArrayList<>();
        for (int w : manifest.decodeWidths()) {
            if (!seconds.containsKey(w)) {
                missing.add(w);
            }
        }
        if (!missing.isEmpty()) {
            return "the cost table lacks the bundle's decode widths " + missing + " (it has " + seconds.keySet() + ")";
        }
        return null;
    }

    private static String head(String sha) {
        return sha.substring(0, Math.min(12, sha.length()));
    }

    public static CostTable fromJson(String text, String originName) {
        Object parsed;
        try {
            parsed = Json.parse(text);
        } catch (JsonException err) {
            throw new CostTableException(originName + " is not readable JSON (" + err.getMessage() + ")");
        }
        return fromJson(parsed, originName);
    }

    /** A table from its parsed JSON form ({@link Json#parse}). */
    public static CostTable fromJson(Object parsed, String originName) {
        Object format = parsed instanceof Map ? ((Map<?, ?>) parsed).get("format") : null;
        if (!FORMAT.equals(format)) {
            throw new CostTableException(originName + " is not an mtpedge cost table (format " + format + ")");
        }
        Map<String, Object> data = JsonValues.object(parsed, originName);
        Object version = data.get("version");
        if (!(version instanceof Long) || (Long) version != VERSION) {
            throw new CostTableException(originName + ": cost table version " + version + ", this app reads "
                    + VERSION + ": profile the bundle again (`mtpedge hub profile --cost-file`)");
        }
        try {
            Map<String, Object> bundle = JsonValues.objectField(data, "bundle", originName);
            Map<Integer, Double> seconds = new TreeMap<>();
            for (Map.Entry<String, Object> e : JsonValues.objectField(data, "seconds", originName).entrySet()) {
                seconds.put(Integer.parseInt(e.getKey().trim()), JsonValues.doubleValue(e.getValue(), "seconds"));
            }
            String device = data.containsKey("device") ? String.valueOf(data.get("device")) : "";
            String origin = data.containsKey("origin") ? String.valueOf(data.get("origin")) : "file";
            return new CostTable(seconds, JsonValues.stringField(bundle, "model_name", "bundle"),
                    JsonValues.stringField(bundle, "source_sha256", "bundle"),
                    JsonValues.intField(bundle, "context", "bundle"), device, origin);
        } catch (JsonException | NumberFormatException err) {
            throw new CostTableException(originName + " is malformed (" + err.getMessage() + "): profile it again");
        }
    }

    public static CostTable load(Path path) {
        String text;
        try {
            text = new String(Files.readAllBytes(path), StandardCharsets.UTF_8);
        } catch (NoSuchFileException err) {
            throw new CostTableException("cost table " + path + " does not exist");
        } catch (IOException err) {
            throw new CostTableException("cost table " + path + " cannot be read (" + err.getMessage() + ")");
        }
        return fromJson(text, path.toString());
    }
}

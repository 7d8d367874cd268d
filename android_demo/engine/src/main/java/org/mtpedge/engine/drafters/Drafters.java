package org.mtpedge.engine.drafters;

import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;

import org.mtpedge.engine.Drafter;
import org.mtpedge.engine.Engine;
import org.mtpedge.engine.GraphEntry;
import org.mtpedge.engine.Manifest;
import org.mtpedge.engine.json.JsonValues;

/**
 * The drafter registry of the app: {@code make(name, engine, options)} with the Python defaults
 * ({@code mtpedge.runtime.drafters.make_drafter}); "none" = plain decoding (null). ESP and the hybrid use the
 * bundle's learned masks when it has them (else the vocab mean); "mtp" needs a bundle with a multi-token adapter.
 */
public final class Drafters {
    public static final String[] NAMES = {"none", "esp", "hybrid", "lookup", "mtp"};

    private Drafters() {
    }

    /**
     * What a bundle decodes with when no drafter is chosen, as mtpedge.runtime.drafters.default_drafter: "lookup"
     * where drafting is token-identical to plain decoding by the recipe, "none" (plain decoding) where it is not:
     * 4-bit MatMuls with float activations, and QDQ / QNN bundles with several decode graphs (the HTP computes a
     * row otherwise at another width; with one decode graph plain decoding runs the graph the drafts run).
     */
    public static String defaultFor(Manifest manifest) {
        if (manifest.extras.containsKey("qdq")) {
            Set<String> decodeGraphs = new HashSet<>();
            for (GraphEntry g : manifest.graphs) {
                if (g.kind.equals("decode")) {
                    decodeGraphs.add(g.width + "@" + g.context);
                }
            }
            return decodeGraphs.size() == 1 ? "lookup" : "none";
        }
        Object quantization = manifest.extras.get("quantization");
        Object config = quantization == null ? null
                : JsonValues.object(quantization, "manifest.extras.quantization").get("config");
        if (config == null) {
            return "lookup";
        }
        Map<String, Object> recipe = JsonValues.object(config, "manifest.extras.quantization.config");
        boolean fourBit = "gguf".equals(recipe.get("weights")) || "int4".equals(recipe.get("weights"))
                || "int4".equals(recipe.get("output_layer"));
        Object level = recipe.get("accuracy_level");
        Object floatRoles = recipe.get("float_activation_roles");
        boolean noFloatRoles = floatRoles == null || (floatRoles instanceof List && ((List<?>) floatRoles).isEmpty());
        boolean int8Activations = !fourBit || (level != null && JsonValues.longValue(level, "accuracy_level") == 4
                && noFloatRoles);
        return int8Activations ? "lookup" : "none";
    }

    /**
     * The "static" option of the drafters with lookup chains: "auto" (the default) is the table the bundle holds (its export copied the one shipped
     * for its tokenizer), "none" is none; the app reads no other file.
     */
    private static StaticNgrams staticTable(Engine engine, Map<String, String> options) {
        String option = text(options, "static", "auto");
        if (option.equals("none")) {
            return null;
        }
        if (!option.equals("auto")) {
            throw new IllegalArgumentException("static must be auto or none in the app, got " + option);
        }
        return StaticNgrams.forBundle(engine);
    }

    public static Drafter make(String name, Engine engine, Map<String, String> options) {
        switch (name) {
            case "none":
                return null;
            case "esp":
                return new EspDrafter(engine, maskSettings(engine, options), text(options, "tree", "static"),
                        integer(options, "width", 16));
            case "lookup":
                return new LookupDrafter(engine, integer(options, "width", 8), integer(options, "max_ngram", 3),
                        integer(options, "min_ngram", 1), integer(options, "branches", 1), staticTable(engine, options));
            case "hybrid":
                return new HybridDrafter(engine, maskSettings(engine, options), integer(options, "width", 16),
                        integer(options, "max_ngram", 3), integer(options, "min_ngram", 1),
                        integer(options, "branches", 2), staticTable(engine, options));
            case "mtp":
                boolean lookup = options.containsKey("lookup") ? bool(options, "lookup", false)
                        : text(options, "mtp_layout", "tree").equals("tree");
                return new MtpDrafter(engine, text(options, "mtp_layout", "tree"),
                        options.containsKey("masks") ? Integer.valueOf(integer(options, "masks", 0)) : null,
                        bool(options, "sampler", true), integer(options, "candidates", 64),
                        integer(options, "width", 16), integer(options, "branch", 4), number(options, "mask_gain", 2.0),
                        // prompt-lookup chains: on by default for the tree layout, as in mtpedge.runtime.drafters.mtp
                        lookup, lookup ? staticTable(engine, options) : null);
            default:
                throw new IllegalArgumentException("unknown drafter '" + name + "': choose one of "
                        + String.join(", ", NAMES));
        }
    }

    private static MaskSettings maskSettings(Engine engine, Map<String, String> options) {
        return MaskSettings.resolve(engine, options.get("mask_init"), integer(options, "masks", 1),
                options.containsKey("mask_update") ? Double.valueOf(number(options, "mask_update", 0)) : null);
    }

    private static boolean bool(Map<String, String> options, String key, boolean fallback) {
        if (!options.containsKey(key)) {
            return fallback;
        }
        String value = options.get(key).trim().toLowerCase(java.util.Locale.ROOT);
        if (value.equals("true") || value.equals("1") || value.equals("yes")) {
            return true;
        }
        if (value.equals("false") || value.equals("0") || value.equals("no")) {
            return false;
        }
        throw new IllegalArgumentException("option " + key + " takes true or false, got '" + options.get(key) + "'");
    }

    private static String text(Map<String, String> options, String key, String fallback) {
        return options.getOrDefault(key, fallback);
    }

    private static int integer(Map<String, String> options, String key, int fallback) {
        return options.containsKey(key) ? Integer.parseInt(options.get(key)) : fallback;
    }

    private static double number(Map<String, String> options, String key, double fallback) {
        return options.containsKey(key) ? Double.parseDouble(options.get(key)) : fallback;
    }
}

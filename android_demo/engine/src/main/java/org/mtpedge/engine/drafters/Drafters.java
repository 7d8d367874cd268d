package org.mtpedge.engine.drafters;

import java.util.Map;

import org.mtpedge.engine.Drafter;
import org.mtpedge.engine.Engine;

/**
 * The drafter registry of the app: {@code make(name, engine, options)} with the Python defaults
 * ({@code mtpedge.runtime.drafters.make_drafter}); "none" = plain decoding (null).
 */
public final class Drafters {
    public static final String[] NAMES = {"none", "esp", "hybrid", "lookup"};

    private Drafters() {
    }

    public static Drafter make(String name, Engine engine, Map<String, String> options) {
        switch (name) {
            case "none":
                return null;
            case "esp":
                return new EspDrafter(engine, integer(options, "masks", 1), text(options, "mask_init", "mean"),
                        number(options, "mask_update", 0.1), text(options, "tree", "static"),
                        integer(options, "width", 16));
            case "lookup":
                return new LookupDrafter(engine, integer(options, "width", 8), integer(options, "max_ngram", 3),
                        integer(options, "min_ngram", 1), integer(options, "branches", 1));
            case "hybrid":
                return new HybridDrafter(engine, integer(options, "masks", 1), text(options, "mask_init", "mean"),
                        number(options, "mask_update", 0.1), integer(options, "width", 16),
                        integer(options, "max_ngram", 3), integer(options, "min_ngram", 1),
                        integer(options, "branches", 2));
            default:
                throw new IllegalArgumentException("unknown drafter '" + name + "': choose one of "
                        + String.join(", ", NAMES));
        }
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

package org.mtpedge.engine;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.ArrayList;
import java.util.Collections;
import java.util.Comparator;
import java.util.List;
import java.util.Map;

import org.mtpedge.engine.json.Json;
import org.mtpedge.engine.json.JsonException;
import org.mtpedge.engine.json.JsonValues;

/**
 * The bundle's manifest.json as the engine needs it; the Java side of {@code mtpedge.runtime.bundle}.
 * Refuses a bundle it cannot run, saying what is wrong and what to do.
 */
public final class Manifest {
    public static final String FORMAT = "mtpedge-bundle";
    /** 2: the graphs place the block's K/V at the cache columns cache_slots names (1: after the C columns). */
    public static final int VERSION = 2;
    public static final String FILE = "manifest.json";

    public final String modelName;
    public final DecoderConfig config;
    public final int context;
    public final String tokenizerFile;
    public final Integer bosTokenId;
    public final int[] eosTokenIds;
    public final String chatTemplate;
    public final boolean addBosToken;
    public final String embeddingsFile;
    /** Sorted by width, narrowest first. */
    public final List<GraphEntry> graphs;
    public final float maskValue;
    /** SHA-256 of the source weights: what a cost table or a masks file is checked against. */
    public final String sourceSha256;
    public final Map<String, Object> extras;

    private Manifest(String modelName, DecoderConfig config, int context, String tokenizerFile, Integer bosTokenId,
                     int[] eosTokenIds, String chatTemplate, boolean addBosToken, String embeddingsFile,
                     List<GraphEntry> graphs, float maskValue, String sourceSha256, Map<String, Object> extras) {
        this.modelName = modelName;
        this.config = config;
        this.context = context;
        this.tokenizerFile = tokenizerFile;
        this.bosTokenId = bosTokenId;
        this.eosTokenIds = eosTokenIds;
        this.chatTemplate = chatTemplate;
        this.addBosToken = addBosToken;
        this.embeddingsFile = embeddingsFile;
        this.graphs = graphs;
        this.maskValue = maskValue;
        this.sourceSha256 = sourceSha256;
        this.extras = extras;
    }

    public static Manifest read(Path folder) {
        Path path = folder.resolve(FILE);
        if (!Files.isDirectory(folder)) {
            throw new BundleException("bundle folder " + folder + " does not exist: export one with `mtpedge export` "
                    + "and push it (see android_demo/README.md)");
        }
        if (!Files.isRegularFile(path)) {
            throw new BundleException(folder + " has no " + FILE + ": it is not an mtpedge bundle (or its copy is "
                    + "incomplete); push the whole bundle folder again");
        }
        Manifest manifest;
        try {
            manifest = parse(new String(Files.readAllBytes(path), StandardCharsets.UTF_8));
        } catch (IOException err) {
            throw new BundleException("cannot read " + path + ": " + err.getMessage(), err);
        }
        List<String> missing = new ArrayList<>();
        List<String> files = new ArrayList<>(Arrays.asList(manifest.tokenizerFile, manifest.embeddingsFile));
        for (GraphEntry g : manifest.graphs) {
            files.add(g.file);
        }
        for (String f : files) {
            if (!Files.isRegularFile(folder.resolve(f))) {
                missing.add(f);
            }
        }
        if (!missing.isEmpty()) {
            throw new BundleException("bundle " + folder + " lacks " + missing + ": push the whole bundle folder again");
        }
        return manifest;
    }

    public static Manifest parse(String json) {
        Map<String, Object> data;
        try {
            data = JsonValues.object(Json.parse(json), "manifest");
        } catch (JsonException err) {
            throw new BundleException("manifest.json is not valid JSON (" + err.getMessage() + "): re-run "
                    + "`mtpedge export`", err);
        }
        if (!FORMAT.equals(data.get("format"))) {
            throw new BundleException("manifest.json is not an mtpedge bundle manifest (format " + data.get("format")
                    + ")");
        }
        Object version = data.get("version");
        if (!(version instanceof Long) || (Long) version != VERSION) {
            throw new BundleException("bundle version " + version + " but this app reads version " + VERSION
                    + " (graphs with a cache_slots input and an attention bias over the C cache columns): re-export "
                    + "the model with an mtpedge that writes version " + VERSION);
        }
        try {
            String where = "manifest";
            DecoderConfig config = DecoderConfig.fromJson(JsonValues.objectField(data, "config", where));
            int context = JsonValues.intField(data, "context", where);
            Map<String, Object> tok = JsonValues.objectField(data, "tokenizer", where);
            Object bos = tok.get("bos_token_id");
            List<GraphEntry> graphs = new ArrayList<>();
            for (Object g : JsonValues.arrayField(data, "graphs", where)) {
                Map<String, Object> m = JsonValues.object(g, "manifest.graphs[]");
                String w = "graph " + m.get("name");
                if (JsonValues.intField(m, "context", w) < context) {
                    continue;  // a smaller context bucket (CPU bundles): this engine runs the full-context graphs
                }
                graphs.add(new GraphEntry(JsonValues.stringField(m, "name", w), JsonValues.stringField(m, "file", w),
                        JsonValues.stringField(m, "kind", w), JsonValues.intField(m, "width", w),
                        JsonValues.intField(m, "context", w),
                        m.containsKey("precision") ? JsonValues.stringField(m, "precision", w) : "float32"));
            }
            graphs.sort(Comparator.comparingInt(g -> g.width));
            if (graphs.isEmpty()) {
                throw new BundleException("the manifest lists no graphs; re-run `mtpedge export`");
            }
            boolean hasDecode = false;
            for (GraphEntry g : graphs) {
                if (g.context != context) {
                    throw new BundleException("graph " + g.name + " has context " + g.context + ", the bundle "
                            + context + "; re-run `mtpedge export`");
                }
                hasDecode |= g.kind.equals("decode");
            }
            if (!hasDecode) {
                throw new BundleException("the bundle has no decode graph; re-run `mtpedge export`");
            }
            Object extras = data.get("extras");
            return new Manifest(
                    JsonValues.stringField(data, "model_name", where), config, context,
                    JsonValues.stringField(tok, "file", "manifest.tokenizer"),
                    bos == null ? null : Math.toIntExact(JsonValues.longValue(bos, "bos_token_id")),
                    JsonValues.intArray(JsonValues.field(tok, "eos_token_ids", "manifest.tokenizer"), "eos_token_ids"),
                    JsonValues.optString(tok, "chat_template"),
                    JsonValues.boolField(tok, "add_bos_token", false),
                    JsonValues.stringField(data, "embeddings_file", where),
                    Collections.unmodifiableList(graphs),
                    (float) JsonValues.doubleField(data, "mask_value", where),
                    data.containsKey("source_sha256") ? JsonValues.stringField(data, "source_sha256", where) : "",
                    extras == null ? Collections.<String, Object>emptyMap() : JsonValues.object(extras, "manifest.extras"));
        } catch (JsonException err) {
            throw new BundleException("manifest.json is malformed (" + err.getMessage() + "): re-run `mtpedge export`",
                    err);
        }
    }

    /** The multi-token adapter's extras (extras["mtp"]: k, rank, sampler, files), or null if the bundle has none. */
    public Map<String, Object> mtpExtras() {
        Object mtp = extras.get("mtp");
        return mtp == null ? null : JsonValues.object(mtp, "manifest.extras.mtp");
    }

    /** Whether the graphs take the adapter's lora_gate input and return hidden_states (extras["mtp"]["adapter_graphs"]). */
    public boolean adapterGraphs() {
        Map<String, Object> mtp = mtpExtras();
        return mtp != null && JsonValues.boolField(mtp, "adapter_graphs", false);
    }

    /** The distinct widths of the decode graphs, ascending. */
    public int[] decodeWidths() {
        return graphs.stream().filter(g -> g.kind.equals("decode")).mapToInt(g -> g.width).distinct().sorted()
                .toArray();
    }

    public int maxWidth() {
        return graphs.get(graphs.size() - 1).width;
    }

    /**
     * The most slots a decode step may use: the widest decode graph (drafted blocks never spill into a wider
     * prefill graph), as mtpedge.runtime.graphs.GraphSet.max_decode_width.
     */
    public int maxDecodeWidth() {
        int[] widths = decodeWidths();
        return widths.length > 0 ? widths[widths.length - 1] : maxWidth();
    }

    /** The narrowest graph with at least n slots (any kind), as the Python engine chooses. */
    public GraphEntry entryFor(int n) {
        for (GraphEntry g : graphs) {
            if (g.width >= n) {
                return g;
            }
        }
        List<Integer> widths = new ArrayList<>();
        for (GraphEntry g : graphs) {
            widths.add(g.width);
        }
        throw new BundleException("a block of " + n + " slots fits no graph of this bundle (widths " + widths
                + "); re-export with a wider --decode-widths");
    }
}

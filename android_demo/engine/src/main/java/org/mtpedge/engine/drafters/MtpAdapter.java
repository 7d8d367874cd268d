package org.mtpedge.engine.drafters;

import java.nio.file.Path;
import java.util.Map;

import org.mtpedge.engine.BundleException;
import org.mtpedge.engine.Engine;
import org.mtpedge.engine.Npy;
import org.mtpedge.engine.json.JsonValues;

/**
 * The bundle's multi-token adapter as the drafters read it (extras["mtp"] and the files it names): its k learned
 * mask embeddings, whether its gated LoRA is on at the mask slots (rank &gt; 0), and whether it has a sampler
 * head; port of the bundle side of {@code mtpedge.runtime.drafters.mtp_head}. A bundle exported with learned
 * masks only (the default model's shipped masks) has an adapter of rank 0 without a sampler head.
 */
public final class MtpAdapter {
    /** Masks the adapter was trained with. */
    public final int k;
    public final int rank;
    public final boolean hasSampler;
    /** (k, hidden) learned mask embeddings. */
    final float[][] masks;
    private final Map<String, Object> extras;

    private MtpAdapter(Map<String, Object> extras, float[][] masks) {
        this.extras = extras;
        this.k = JsonValues.intField(extras, "k", "manifest.extras.mtp");
        this.rank = extras.containsKey("rank") && extras.get("rank") != null
                ? JsonValues.intField(extras, "rank", "manifest.extras.mtp") : 0;
        this.hasSampler = JsonValues.boolField(extras, "sampler", false);
        this.masks = masks;
    }

    /** Whether the bundle carries learned masks (ESP and the hybrid then use them by default, as Python does). */
    public static boolean hasLearnedMasks(Engine engine) {
        Map<String, Object> mtp = engine.manifest.mtpExtras();
        return mtp != null && mtp.get("masks_file") instanceof String;
    }

    /** The engine's adapter; a clear error if the bundle has none or lacks a file its manifest names. */
    public static MtpAdapter load(Engine engine) {
        Map<String, Object> extras = engine.manifest.mtpExtras();
        if (extras == null) {
            throw new BundleException("the bundle has no multi-token adapter: export it with `mtpedge export "
                    + "--mtp-adapter ADAPTER.pt` (or `--mtp-adapter default` for the default model) and push it again");
        }
        float[][] masks = file(engine, JsonValues.stringField(extras, "masks_file", "manifest.extras.mtp"))
                .rows("learned masks");
        if (masks.length == 0 || masks[0].length != engine.config.hiddenSize) {
            throw new BundleException("learned masks of " + masks.length + " rows of " + (masks.length == 0 ? 0
                    : masks[0].length) + " values do not fit hidden size " + engine.config.hiddenSize);
        }
        return new MtpAdapter(extras, masks);
    }

    /** The first {@code count} learned masks (copies). */
    public float[][] masks(int count) {
        if (count < 1 || count > masks.length) {
            throw new IllegalArgumentException("the adapter has " + masks.length + " learned masks, asked for " + count);
        }
        float[][] out = new float[count][];
        for (int j = 0; j < count; j++) {
            out[j] = masks[j].clone();
        }
        return out;
    }

    /** The sampler head (host side), scoring the top {@code candidates} plain logits of a mask (0 = all). */
    public SamplerHead samplerHead(Engine engine, int candidates) {
        if (!hasSampler) {
            throw new BundleException("the bundle's adapter has no sampler head (it was trained with --no-sampler)");
        }
        Map<String, Npy.Array> weights = Npy.readArchive(path(engine,
                JsonValues.stringField(extras, "sampler_file", "manifest.extras.mtp")));
        Object unembedding = extras.get("unembedding");
        String name = unembedding instanceof String ? (String) unembedding : "embeddings";
        Object form = extras.get("sampler_form");
        boolean paper = "paper".equals(form);
        if (form != null && !paper && !"residual".equals(form)) {
            throw new BundleException("the sampler head has the form " + form + ", which this engine does not know: "
                    + "update the app or re-export the bundle with its version of mtpedge");
        }
        return new SamplerHead(weights, paper, engine.embeddings,
                name.equals("embeddings") ? engine.embeddings : org.mtpedge.engine.EmbeddingTable.open(path(engine, name)),
                candidates);
    }

    static Npy.Array file(Engine engine, String name) {
        return Npy.read(path(engine, name));
    }

    private static Path path(Engine engine, String name) {
        if (engine.folder == null) {
            throw new BundleException("the engine was made without its bundle folder, where " + name + " is");
        }
        Path path = engine.folder.resolve(name);
        if (!java.nio.file.Files.isRegularFile(path)) {
            throw new BundleException("the bundle lacks " + name + " named by its manifest: push the whole bundle "
                    + "folder again (or re-run `mtpedge export --mtp-adapter ...`)");
        }
        return path;
    }
}

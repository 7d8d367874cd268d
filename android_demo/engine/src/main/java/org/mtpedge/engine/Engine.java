package org.mtpedge.engine;

import java.util.Arrays;

/**
 * A loaded bundle, its KV cache, and one verb that runs any block of slots in one graph call; port of
 * {@code mtpedge.runtime.engine.Engine}.
 *
 * <pre>
 * float[] logits = engine.prefill(promptIds);             // commits the prompt's KV
 * GraphOutput out = engine.runTree(tree, slotEmbeddings);  // one call: tree nodes (+ mask slots)
 * engine.cache.commitAcceptedKv(out.newKeys, out.newValues, out.width, acceptedSlots);
 * </pre>
 */
public final class Engine implements AutoCloseable {
    public final Manifest manifest;
    public final DecoderConfig config;
    public final int context;
    public final Embeddings embeddings;
    public final KvCache cache;
    /** The bundle's tree templates, checked here once: a static tree's layout is read from its template. */
    public final TreeTemplates templates;
    private final GraphRunner runner;
    private final Rope rope;
    private int graphCalls;
    private double graphSeconds;

    public Engine(Manifest manifest, Embeddings embeddings, GraphRunner runner) {
        DecoderConfig cfg = manifest.config;
        if (embeddings.rows() != cfg.vocabSize || embeddings.dim() != cfg.hiddenSize) {
            throw new BundleException("embedding table has shape (" + embeddings.rows() + ", " + embeddings.dim()
                    + "), the manifest says (" + cfg.vocabSize + ", " + cfg.hiddenSize + "): re-run `mtpedge export`");
        }
        this.manifest = manifest;
        this.config = cfg;
        this.context = manifest.context;
        this.embeddings = embeddings;
        this.runner = runner;
        this.rope = new Rope(cfg.rope, cfg.headDim);
        this.cache = new KvCache(cfg.numLayers, cfg.numKvHeads, context, cfg.headDim);
        this.templates = TreeTemplates.fromExtras(manifest.extras);
    }

    public int graphCalls() {
        return graphCalls;
    }

    public double graphSeconds() {
        return graphSeconds;
    }

    public String runnerDescription() {
        return runner.describe();
    }

    public int[] stopTokenIds() {
        return manifest.eosTokenIds.clone();
    }

    /**
     * One graph call over n slots (embeds: n x hidden, row-major) arranged as a tree rooted at position nPast;
     * nothing is committed.
     */
    public GraphOutput runBlock(float[] embeds, int[] parents) {
        int n = parents.length;
        int hidden = config.hiddenSize;
        if (embeds.length != n * hidden) {
            throw new IllegalArgumentException("expected " + n + " x " + hidden + " embedding values, got "
                    + embeds.length);
        }
        GraphEntry entry = manifest.entryFor(n);
        BlockInputs inputs = BlockInputs.build(templates.layoutFor(parents), cache.nPast(), entry.width, context,
                manifest.maskValue);
        float[] padded = Arrays.copyOf(embeds, entry.width * hidden);
        float[][] tables = rope.tables(inputs.positions);
        GraphOutput out = runner.run(entry, padded, inputs, tables[0], tables[1], cache);
        graphCalls++;
        graphSeconds += out.seconds;
        return out;
    }

    /** Embeddings of a tree's nodes: table rows for tokens, drafter-supplied vectors for SLOT nodes (in order). */
    public float[] treeEmbeddings(DraftTree tree, float[][] slotEmbeddings) {
        int hidden = config.hiddenSize;
        int slots = tree.slotCount();
        if (slots > 0 && (slotEmbeddings == null || slotEmbeddings.length != slots)) {
            throw new IllegalArgumentException("the tree has " + slots + " slot nodes: pass one embedding row for each");
        }
        float[] embeds = new float[tree.size() * hidden];
        int slot = 0;
        for (int i = 0; i < tree.size(); i++) {
            if (tree.token(i) == DraftTree.SLOT) {
                float[] row = slotEmbeddings[slot++];
                if (row.length != hidden) {
                    throw new IllegalArgumentException("slot embedding of " + row.length + " values, expected " + hidden);
                }
                System.arraycopy(row, 0, embeds, i * hidden, hidden);
            } else {
                embeddings.copyRow(tree.token(i), embeds, i * hidden);
            }
        }
        return embeds;
    }

    public GraphOutput runTree(DraftTree tree, float[][] slotEmbeddings) {
        return runBlock(treeEmbeddings(tree, slotEmbeddings), tree.parents());
    }

    /** Run and commit {@code tokens} after the cache's contents in chunks of the widest graph; last token's logits. */
    public float[] prefill(int[] tokens) {
        if (tokens.length == 0) {
            throw new IllegalArgumentException("prefill needs at least one token");
        }
        if (tokens.length > cache.free()) {
            throw new ContextOverflowException("the prompt has " + tokens.length + " tokens but only " + cache.free()
                    + " of the bundle's " + context + " context positions are free: shorten the prompt or export "
                    + "with a larger --context");
        }
        int chunk = manifest.maxWidth();
        float[] logits = null;
        for (int start = 0; start < tokens.length; start += chunk) {
            int size = Math.min(chunk, tokens.length - start);
            int[] chain = new int[size]; // a chain is plain causal attention
            int[] slots = new int[size];
            float[] embeds = new float[size * config.hiddenSize];
            for (int i = 0; i < size; i++) {
                chain[i] = i - 1;
                slots[i] = i;
                embeddings.copyRow(tokens[start + i], embeds, i * config.hiddenSize);
            }
            GraphOutput out = runBlock(embeds, chain);
            cache.commitAcceptedKv(out.newKeys, out.newValues, out.width, slots);
            logits = out.logitsRow(size - 1);
        }
        return logits;
    }

    public void reset() {
        cache.reset();
    }

    @Override
    public void close() {
        runner.close();
    }
}

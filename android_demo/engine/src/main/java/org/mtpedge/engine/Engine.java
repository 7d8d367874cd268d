package org.mtpedge.engine;

import java.nio.file.Path;
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
    /** The bundle folder, where drafters find the files the manifest's extras name (learned masks, sampler head). */
    public final Path folder;
    /**
     * What a call of each decode width costs on this device (a profile's file, or {@link CostTable#flat}); drafters
     * that size their trees read it when they are made (null: their trees fill their width).
     */
    public CostTable costTable;
    private final GraphRunner runner;
    private final boolean adapterGraphs; // the graphs take a lora_gate input
    private final Rope rope;
    private int graphCalls;
    private double graphSeconds;

    public Engine(Manifest manifest, Embeddings embeddings, GraphRunner runner) {
        this(manifest, embeddings, runner, null);
    }

    /** folder: the bundle's folder (null: a bundle without extra files; drafters that need one refuse it). */
    public Engine(Manifest manifest, Embeddings embeddings, GraphRunner runner, Path folder) {
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
        this.folder = folder;
        this.adapterGraphs = manifest.adapterGraphs();
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
     * nothing is committed. Padding rows (up to the graph's width) see only the column they share, so the block
     * must leave them a free position; rows past the context's end are run but mean nothing ({@link BlockInputs}).
     * {@link GraphOutput#plainRows()}: the rows computed as plain decoding computes them.
     */
    public GraphOutput runBlock(float[] embeds, int[] parents) {
        return runBlock(embeds, parents, null);
    }

    /**
     * As {@link #runBlock(float[], int[])}, with the adapter's LoRA gate per slot (null: all 0, the base model).
     * Graphs of an adapter bundle always get a gate; a gate that is on anywhere is refused for other bundles.
     */
    public GraphOutput runBlock(float[] embeds, int[] parents, float[] gate) {
        int n = parents.length;
        int hidden = config.hiddenSize;
        if (embeds.length != n * hidden) {
            throw new IllegalArgumentException("expected " + n + " x " + hidden + " embedding values, got "
                    + embeds.length);
        }
        GraphEntry entry = manifest.entryFor(n);
        float[] feedGate = null;
        if (adapterGraphs) {
            feedGate = gate != null ? gate : new float[n];
        } else if (gate != null) {
            for (float g : gate) {
                if (g != 0f) {
                    throw new BundleException("a drafter asked for the LoRA gate but this bundle's graphs have no "
                            + "adapter: export one with `mtpedge export --mtp-adapter ADAPTER.pt`");
                }
            }
        }
        BlockInputs inputs = BlockInputs.build(templates.layoutFor(parents), cache.nPast(), entry.width, context,
                manifest.maskValue, feedGate);
        float[] padded = Arrays.copyOf(embeds, entry.width * hidden);
        float[][] tables = rope.tables(inputs.positions);
        GraphOutput out = runner.run(entry, padded, inputs, tables[0], tables[1], cache);
        out.plainRows = Math.min(inputs.rowsInContext, leadingChain(parents));
        graphCalls++;
        graphSeconds += out.seconds;
        return out;
    }

    /**
     * How many first nodes form a chain from the root (node i the child of node i - 1): the rows whose keys sit at
     * the cache columns of their positions, where plain decoding reads them (graph contract v2).
     */
    public static int leadingChain(int[] parents) {
        int n = 1;
        while (n < parents.length && parents[n] == n - 1) {
            n++;
        }
        return Math.min(n, parents.length);
    }

    /** Whether a block of n slots runs at the current position with every row inside the context. */
    public boolean fits(int n) {
        return BlockInputs.rowsWithColumns(n, cache.nPast(), manifest.entryFor(n).width, context) == n;
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
        return runTree(tree, slotEmbeddings, false);
    }

    /** loraOnSlots: gate 1 at SLOT nodes (the adapter's learned masks), 0 at token nodes. */
    public GraphOutput runTree(DraftTree tree, float[][] slotEmbeddings, boolean loraOnSlots) {
        float[] gate = null;
        if (loraOnSlots) {
            gate = new float[tree.size()];
            for (int i = 0; i < gate.length; i++) {
                gate[i] = tree.token(i) == DraftTree.SLOT ? 1f : 0f;
            }
        }
        return runBlock(treeEmbeddings(tree, slotEmbeddings), tree.parents(), gate);
    }

    /**
     * Run and commit {@code tokens} after the cache's contents in chunks of the widest graph (narrower at the
     * context's end, where padding rows need a free column); the last token's logits.
     */
    public float[] prefill(int[] tokens) {
        if (tokens.length == 0) {
            throw new IllegalArgumentException("prefill needs at least one token");
        }
        if (tokens.length > cache.free()) {
            throw new ContextOverflowException("the prompt has " + tokens.length + " tokens but only " + cache.free()
                    + " of the bundle's " + context + " context positions are free: shorten the prompt or export "
                    + "with a larger --context");
        }
        float[] logits = null;
        for (int start = 0; start < tokens.length; ) {
            int size = Math.min(manifest.maxWidth(), tokens.length - start);
            while (size > 1 && !fits(size)) { // at the context's end: leave the padding rows a column
                size--;
            }
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
            start += size;
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

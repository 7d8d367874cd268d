package org.mtpedge.engine.drafters;

import org.mtpedge.engine.DraftTree;
import org.mtpedge.engine.Drafter;
import org.mtpedge.engine.Engine;
import org.mtpedge.engine.GraphOutput;
import org.mtpedge.engine.StepSizer;

/**
 * Hybrid drafting: mask-probe (ESP) and prompt-lookup candidates in one tree, verified in one call; port of
 * {@code mtpedge.runtime.drafters.hybrid}. Lookup nodes are scored by estimated acceptance (per-depth rates,
 * the r-th continuation discounted by 1 / (r + 1)), mask nodes by P(parent) * p_i(token); the best
 * B = width / (k + 1) form the tree, and every token node gets its k mask slots. With a cost table on the engine,
 * only the candidates that pay for the wider call they (and their masks) need are kept ({@link StepSizer}).
 */
public final class HybridDrafter implements Drafter {
    private final MaskProbe probe;
    private final NgramSource lookup;
    private final int nodes;
    private final int maxWidth;
    private final StepSizer sizer;
    private boolean[] fromLookup = {true};

    /** table: lookup's static n-gram table (null: none), as {@link LookupDrafter}'s. */
    public HybridDrafter(Engine engine, MaskSettings settings, int width, int maxNgram, int minNgram, int branches,
                         StaticNgrams table) {
        this.probe = new MaskProbe(engine, settings);
        this.sizer = engine.costTable == null ? null : new StepSizer(engine.costTable);
        int masks = settings.slots;
        width = Math.min(width, engine.manifest.maxDecodeWidth());
        this.maxWidth = engine.manifest.maxDecodeWidth();
        this.nodes = width / (masks + 1);
        if (nodes < 1) {
            throw new IllegalArgumentException("a width of " + width + " slots cannot hold a root and its " + masks
                    + " mask slot(s)");
        }
        this.lookup = new NgramSource(maxNgram, minNgram, Math.max(1, nodes - 1), branches, table);
    }

    @Override
    public String name() {
        return "hybrid";
    }

    @Override
    public void start(Engine engine, int[] promptIds, float[] prefillLogits) {
        probe.start(promptIds);
        lookup.reset();
    }

    @Override
    public Proposal propose(int[] contextIds, int root, int lead) {
        TreeBuild.Pool lookupPool = lookup.pool(contextIds, root);
        TreeBuild.Pool pool = probe.forecast == null ? TreeBuild.concatPools(lookupPool)
                : TreeBuild.concatPools(lookupPool, TreeBuild.maskPool(probe.forecastProbs(), nodes - 1, root));
        int budget = Math.max(1, Math.min(nodes, (maxWidth - lead) / (probe.k + 1)));
        if (sizer != null && lead + probe.k + 1 <= maxWidth) {
            // only the candidates that pay for the wider call they (and their masks) need
            double[] scores = TreeBuild.selectTree(pool, budget).candidateScores();
            budget = 1 + sizer.size(scores, probe.k + 1, lead + probe.k + 1).candidates;
        }
        TreeBuild.Selection tree = TreeBuild.selectTree(pool, budget);
        fromLookup = new boolean[tree.chosen.length];
        for (int i = 0; i < fromLookup.length; i++) {
            fromLookup[i] = tree.chosen[i] < lookupPool.size(); // lookup entries come first in the pool
        }
        return probe.finishTree(tree.tokens, tree.parents);
    }

    @Override
    public void observe(DraftTree tree, GraphOutput out, int[] path) {
        lookup.record(tree, fromLookup, path);
        probe.observe(tree, fromLookup.length, out, path);
        if (sizer != null) {
            sizer.observe(path.length - 1, out.seconds);
        }
    }

    @Override
    public boolean loraOnSlots() {
        return probe.loraOnSlots;
    }

    @Override
    public StepSizer sizer() {
        return sizer;
    }
}

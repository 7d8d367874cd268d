package org.mtpedge.engine.drafters;

import java.util.Arrays;

import org.mtpedge.engine.DraftTree;
import org.mtpedge.engine.Drafter;
import org.mtpedge.engine.Engine;
import org.mtpedge.engine.GraphOutput;
import org.mtpedge.engine.StepSizer;

/**
 * Prompt-lookup drafting: a trie of up to {@code branches} distinct continuations of the newest earlier
 * occurrences of the last n tokens, cut to the width budget by estimated acceptance; port of
 * {@code mtpedge.runtime.drafters.lookup}. No mask slots and no model work. With a cost table on the engine, only
 * the candidates that pay for the wider call they need are kept ({@link StepSizer}).
 */
public final class LookupDrafter implements Drafter {
    private final int budget;
    private final int maxWidth;
    private final NgramSource source;
    private final StepSizer sizer;

    /** table: the static n-gram table for steps without a context match of 2+ tokens (null: none). */
    public LookupDrafter(Engine engine, int width, int maxNgram, int minNgram, int branches, StaticNgrams table) {
        this.budget = Math.min(width, engine.manifest.maxDecodeWidth());
        this.maxWidth = engine.manifest.maxDecodeWidth();
        this.sizer = engine.costTable == null ? null : new StepSizer(engine.costTable);
        this.source = new NgramSource(maxNgram, minNgram, Math.max(1, budget - 1), branches, table);
    }

    @Override
    public String name() {
        return "lookup";
    }

    @Override
    public void start(Engine engine, int[] promptIds, float[] prefillLogits) {
        source.reset();
    }

    @Override
    public Proposal propose(int[] contextIds, int root, int lead) {
        TreeBuild.Pool pool = source.pool(contextIds, root);
        int size = Math.min(budget, maxWidth - lead);
        if (sizer != null && size > 0) { // only the candidates that pay for the wider call they need
            size = 1 + sizer.size(TreeBuild.selectTree(pool, size).candidateScores(), 1, 1 + lead).candidates;
        }
        TreeBuild.Selection tree = TreeBuild.selectTree(pool, size);
        return new Proposal(new DraftTree(tree.tokens, tree.parents), null);
    }

    @Override
    public void observe(DraftTree tree, GraphOutput out, int[] path) {
        boolean[] all = new boolean[tree.size()];
        Arrays.fill(all, true);
        source.record(tree, all, path);
        if (sizer != null) {
            sizer.observe(path.length - 1, out.seconds);
        }
    }

    @Override
    public StepSizer sizer() {
        return sizer;
    }
}

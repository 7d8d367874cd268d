package org.mtpedge.engine.drafters;

import java.util.Arrays;

import org.mtpedge.engine.DraftTree;
import org.mtpedge.engine.Drafter;
import org.mtpedge.engine.Engine;
import org.mtpedge.engine.GraphOutput;

/**
 * Prompt-lookup drafting: a trie of up to {@code branches} distinct continuations of the newest earlier
 * occurrences of the last n tokens, cut to the width budget by estimated acceptance; port of
 * {@code mtpedge.runtime.drafters.lookup}. No mask slots and no model work.
 */
public final class LookupDrafter implements Drafter {
    private final int budget;
    private final NgramSource source;

    public LookupDrafter(Engine engine, int width, int maxNgram, int minNgram, int branches) {
        this.budget = Math.min(width, engine.manifest.maxWidth());
        this.source = new NgramSource(maxNgram, minNgram, Math.max(1, budget - 1), branches);
    }

    @Override
    public String name() {
        return "lookup";
    }

    @Override
    public void start(Engine engine, int[] promptIds, float[] prefillLogits) {
        source.rates.reset();
    }

    @Override
    public Proposal propose(int[] contextIds, int root) {
        TreeBuild.Selection tree = TreeBuild.selectTree(source.pool(contextIds, root), budget);
        return new Proposal(new DraftTree(tree.tokens, tree.parents), null);
    }

    @Override
    public void observe(DraftTree tree, GraphOutput out, int[] path) {
        boolean[] all = new boolean[tree.size()];
        Arrays.fill(all, true);
        source.record(tree, all, path);
    }
}

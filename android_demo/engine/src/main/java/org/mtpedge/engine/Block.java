package org.mtpedge.engine;

import java.util.Arrays;

/**
 * One decode call's tree: the drafter's own, led by {@code lead} nodes, the root and the drafts carried from the
 * call before but the last, which roots the drafter's tree (lead 0: the drafter's tree as it is); port of
 * {@code mtpedge.runtime.generate._Block} and {@code _propose}.
 *
 * <p>A sibling of the leading chain that matched is not accepted (its rows are not plain decoding's), but it is
 * the next root and its rows' greedy path is almost surely right: those tokens lead the next block as a chain that
 * trusted rows verify, and the drafter drafts on from their end, as if the last call had accepted them.
 */
final class Block {
    final DraftTree tree;
    final float[][] slotEmbeddings;
    private final DraftTree own;
    private final int lead;

    private Block(DraftTree tree, float[][] slotEmbeddings, DraftTree own, int lead) {
        this.tree = tree;
        this.slotEmbeddings = slotEmbeddings;
        this.own = own;
        this.lead = lead;
    }

    static Block plain(int root) {
        return new Block(DraftTree.single(root), null, null, 0);
    }

    boolean carried() {
        return lead > 0;
    }

    /** The drafter's tree for this step, led by the carried drafts when it fits beside them. */
    static Block propose(Drafter drafter, Engine engine, int[] context, int root, int[] carry) {
        int room = engine.manifest.maxDecodeWidth() - carry.length;
        if (carry.length > 0 && room > 0 && carry.length + 1 < engine.cache.free()) {
            int[] extended = Arrays.copyOf(context, context.length + carry.length);
            System.arraycopy(carry, 0, extended, context.length, carry.length);
            Drafter.Proposal proposal = drafter.propose(extended, carry[carry.length - 1], carry.length);
            DraftTree own = proposal.tree;
            if (own.size() <= room) {
                int lead = carry.length;
                int[] tokens = new int[lead + own.size()];
                int[] parents = new int[tokens.length];
                tokens[0] = root;
                System.arraycopy(carry, 0, tokens, 1, lead - 1);
                for (int i = 0; i < lead; i++) {
                    parents[i] = i - 1;
                }
                for (int j = 0; j < own.size(); j++) {
                    tokens[lead + j] = own.token(j);
                    parents[lead + j] = own.parent(j) < 0 ? lead - 1 : own.parent(j) + lead;
                }
                return new Block(new DraftTree(tokens, parents), proposal.slotEmbeddings, own, lead);
            }
        }
        Drafter.Proposal proposal = drafter.propose(context, root, 0);
        return new Block(proposal.tree, proposal.slotEmbeddings, proposal.tree, 0);
    }

    /** Show the drafter its own tree's rows and path; nothing when the block failed before reaching it. */
    void observe(Drafter drafter, GraphOutput out, int[] path) {
        if (lead == 0) {
            drafter.observe(tree, out, path);
        } else if (path.length > lead) {
            int[] ownPath = new int[path.length - lead];
            for (int i = 0; i < ownPath.length; i++) {
                ownPath[i] = path[lead + i] - lead;
            }
            drafter.observe(own, out.rowsFrom(lead), ownPath);
        }
    }
}

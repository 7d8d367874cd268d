package org.mtpedge.engine;

/**
 * Proposes a draft tree rooted at {@code root} (the newest token, not yet in the cache); the Java side of the
 * Python {@code Drafter} protocol (start / propose / observe).
 */
public interface Drafter {
    String name();

    void start(Engine engine, int[] promptIds, float[] prefillLogits);

    /**
     * The tree and the embeddings of its SLOT nodes in node order (null if it has none). {@code lead}: the block
     * has that many nodes before this tree's root (drafts carried from the last call, see {@link Generator}), so
     * the tree should fit the widest graph beside them; a tree of a fixed shape may not, and the loop then does
     * without the carried drafts.
     */
    Proposal propose(int[] contextIds, int root, int lead);

    void observe(DraftTree tree, GraphOutput out, int[] path);

    /** Gate 1 at SLOT nodes (an adapter's learned masks trained with its LoRA), 0 at token nodes. */
    default boolean loraOnSlots() {
        return false;
    }

    /** The drafter's per-step tree sizing over the engine's cost table, or null (its trees fill their width). */
    default StepSizer sizer() {
        return null;
    }

    /** A drafter's answer: a tree and its slot embeddings. */
    final class Proposal {
        public final DraftTree tree;
        public final float[][] slotEmbeddings;

        public Proposal(DraftTree tree, float[][] slotEmbeddings) {
            this.tree = tree;
            this.slotEmbeddings = slotEmbeddings;
        }
    }
}

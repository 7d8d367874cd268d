package org.mtpedge.engine;

/**
 * Proposes a draft tree rooted at {@code root} (the newest token, not yet in the cache); the Java side of the
 * Python {@code Drafter} protocol (start / propose / observe).
 */
public interface Drafter {
    String name();

    void start(Engine engine, int[] promptIds, float[] prefillLogits);

    /** The tree and the embeddings of its SLOT nodes in node order (null if it has none). */
    Proposal propose(int[] contextIds, int root);

    void observe(DraftTree tree, GraphOutput out, int[] path);

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

package org.mtpedge.engine;

import java.util.ArrayList;
import java.util.List;

/**
 * Lossless verification of a draft tree against the model's own choices; port of
 * {@code mtpedge.runtime.verify.verify_tree}.
 *
 * <p>Walk from the root: the model chooses the next token from the current node's logits (argmax, or a sample);
 * if a child of the node carries exactly that token, the child is accepted and the walk goes on; otherwise the
 * chosen token is the step's correction ("bonus") token and the walk ends. Every emitted token is what the model
 * itself chose given the accepted prefix, so greedy output equals plain greedy decoding.
 */
public final class Verifier {
    private Verifier() {
    }

    /** Chooses the next token from one row of logits. */
    public interface TokenChooser {
        int choose(float[] logits);
    }

    /** Accepted node indices (starting with the root) and the token chosen after the last of them. */
    public static final class Result {
        public final int[] path;
        public final int nextToken;

        Result(int[] path, int nextToken) {
            this.path = path;
            this.nextToken = nextToken;
        }
    }

    public static Result verify(DraftTree tree, GraphOutput out, TokenChooser chooser) {
        return verify(tree, out, chooser, tree.size());
    }

    /**
     * As {@link #verify(DraftTree, GraphOutput, TokenChooser)} reading only rows [0, trusted): a matching node
     * beyond them is not accepted; its token, which a trusted row chose, is returned as the next token, and no
     * choice is made from its row, so sampling draws exactly as plain decoding does.
     */
    public static Result verify(DraftTree tree, GraphOutput out, TokenChooser chooser, int trusted) {
        List<Integer> path = new ArrayList<>();
        path.add(0);
        int node = 0;
        while (true) {
            int target = chooser.choose(out.logitsRow(node));
            int match = -1;
            for (int child : tree.children(node)) {
                if (tree.token(child) == target && tree.token(child) != DraftTree.SLOT) {
                    match = child;
                    break;
                }
            }
            if (match < 0 || match >= trusted) {
                int[] result = new int[path.size()];
                for (int i = 0; i < result.length; i++) {
                    result[i] = path.get(i);
                }
                return new Result(result, target);
            }
            node = match;
            path.add(node);
        }
    }

    /** The draft tokens a path accepts (the root was emitted by the previous step). */
    public static int[] acceptedTokens(DraftTree tree, int[] path) {
        int[] out = new int[path.length - 1];
        for (int i = 1; i < path.length; i++) {
            out[i - 1] = tree.token(path[i]);
        }
        return out;
    }
}

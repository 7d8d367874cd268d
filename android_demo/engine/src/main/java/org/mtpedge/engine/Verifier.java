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
                return new Result(toArray(path), target);
            }
            node = match;
            path.add(node);
        }
    }

    /** Where the walk stopped at an untrusted match: that node and the greedy path below it, and their choices. */
    public static final class Extension {
        public final int[] nodes;
        public final int[] tokens;

        Extension(int[] nodes, int[] tokens) {
            this.nodes = nodes;
            this.tokens = tokens;
        }
    }

    /**
     * Where {@link #verify(DraftTree, GraphOutput, TokenChooser, int)} stopped at a matching node beyond the
     * trusted rows: the greedy path the untrusted rows accept from that node on (node indices) and the tokens those
     * rows choose, the last one its bonus. They are drafts, not output: the next block leads with them and trusted
     * rows verify them ({@link Generator}). Argmax, so that no sample is drawn from a row plain decoding would not
     * compute. Empty when the walk did not stop at an untrusted match. Port of
     * {@code mtpedge.runtime.verify.untrusted_extension}.
     */
    public static Extension untrustedExtension(DraftTree tree, GraphOutput out, int[] path, int nextToken,
                                               int trusted) {
        int node = -1;
        for (int child : tree.children(path[path.length - 1])) {
            if (tree.token(child) == nextToken && child >= trusted) {
                node = child;
                break;
            }
        }
        List<Integer> nodes = new ArrayList<>();
        List<Integer> tokens = new ArrayList<>();
        while (node >= 0) {
            nodes.add(node);
            int choice = Sampler.argmax(out.logitsRow(node));
            tokens.add(choice);
            int match = -1;
            for (int child : tree.children(node)) {
                if (tree.token(child) == choice) {
                    match = child;
                    break;
                }
            }
            node = match;
        }
        return new Extension(toArray(nodes), toArray(tokens));
    }

    private static int[] toArray(List<Integer> values) {
        int[] out = new int[values.size()];
        for (int i = 0; i < out.length; i++) {
            out[i] = values.get(i);
        }
        return out;
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

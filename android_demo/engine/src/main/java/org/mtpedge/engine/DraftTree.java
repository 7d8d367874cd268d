package org.mtpedge.engine;

import java.util.Arrays;

/**
 * A draft tree: tokens + parent indices, rooted at the last committed token (not yet in the KV cache).
 *
 * <p>Port of {@code mtpedge.runtime.tree.DraftTree}. Nodes whose token is {@link #SLOT} carry no token: their
 * embedding is supplied by the drafter (a mask slot). A chain of k slots under node b is ESP's "k masks after b".
 * The verifier walks only through token nodes. Plain decoding is a tree of one node.
 */
public final class DraftTree {
    /** Token id of a node whose embedding the drafter supplies. */
    public static final int SLOT = -1;

    private final int[] tokens;
    private final int[] parents;

    public DraftTree(int[] tokens, int[] parents) {
        if (tokens.length != parents.length) {
            throw new IllegalArgumentException("tokens (" + tokens.length + ") and parents (" + parents.length
                    + ") must have equal lengths");
        }
        TreeLayout.validateParents(parents);
        if (tokens[0] == SLOT) {
            throw new IllegalArgumentException("the root of a draft tree must be a real token");
        }
        this.tokens = tokens.clone();
        this.parents = parents.clone();
    }

    public static DraftTree single(int token) {
        return new DraftTree(new int[] {token}, new int[] {-1});
    }

    public int size() {
        return tokens.length;
    }

    public int token(int node) {
        return tokens[node];
    }

    public int parent(int node) {
        return parents[node];
    }

    public int[] tokens() {
        return tokens.clone();
    }

    public int[] parents() {
        return parents.clone();
    }

    public int slotCount() {
        int count = 0;
        for (int t : tokens) {
            if (t == SLOT) {
                count++;
            }
        }
        return count;
    }

    /** Children of {@code node} in index order. */
    public int[] children(int node) {
        int count = 0;
        for (int p : parents) {
            if (p == node) {
                count++;
            }
        }
        int[] out = new int[count];
        int k = 0;
        for (int i = 0; i < parents.length; i++) {
            if (parents[i] == node) {
                out[k++] = i;
            }
        }
        return out;
    }

    @Override
    public boolean equals(Object other) {
        return other instanceof DraftTree && Arrays.equals(tokens, ((DraftTree) other).tokens)
                && Arrays.equals(parents, ((DraftTree) other).parents);
    }

    @Override
    public int hashCode() {
        return 31 * Arrays.hashCode(tokens) + Arrays.hashCode(parents);
    }

    @Override
    public String toString() {
        return "DraftTree(tokens=" + Arrays.toString(tokens) + ", parents=" + Arrays.toString(parents) + ")";
    }
}

package org.mtpedge.engine;

import java.util.ArrayList;
import java.util.List;

/**
 * What a graph call needs from a tree of n nodes; port of {@code mtpedge.runtime.tree.tree_layout}.
 *
 * <pre>
 * parents = [-1, 0, 0, 1] (root r, children a and b, c under a):
 *     visible   r a b c      depth   paths
 *       r       ● ○ ○ ○      0       (0, 1, 3)
 *       a       ● ● ○ ○      1       (0, 2)
 *       b       ● ○ ● ○      1
 *       c       ● ● ○ ●      2
 * </pre>
 */
public final class TreeLayout {
    /** visible[i][j]: node i attends to node j (j is i or one of its ancestors). */
    public final boolean[][] visible;
    /** Distance from the root; a node's position is n_past + depth. */
    public final int[] depth;
    /** Node indices of every root-to-leaf path, leaves in index order. */
    public final List<int[]> paths;

    TreeLayout(boolean[][] visible, int[] depth, List<int[]> paths) {
        this.visible = visible;
        this.depth = depth;
        this.paths = paths;
    }

    public static void validateParents(int[] parents) {
        if (parents.length == 0) {
            throw new IllegalArgumentException("a tree needs at least a root");
        }
        if (parents[0] != -1) {
            throw new IllegalArgumentException("parents[0] must be -1 (the root), got " + parents[0]);
        }
        for (int i = 1; i < parents.length; i++) {
            if (parents[i] < 0 || parents[i] >= i) {
                throw new IllegalArgumentException("parents[" + i + "] = " + parents[i]
                        + ": each node's parent must be an earlier node (0 <= p < " + i + ")");
            }
        }
    }

    public static TreeLayout of(int[] parents) {
        validateParents(parents);
        int n = parents.length;
        boolean[][] visible = new boolean[n][n];
        int[] depth = new int[n];
        visible[0][0] = true;
        for (int i = 1; i < n; i++) { // parents come first, so each row extends its parent's finished row
            int p = parents[i];
            System.arraycopy(visible[p], 0, visible[i], 0, n);
            visible[i][i] = true;
            depth[i] = depth[p] + 1;
        }
        boolean[] hasChild = new boolean[n];
        for (int i = 1; i < n; i++) {
            hasChild[parents[i]] = true;
        }
        List<int[]> paths = new ArrayList<>();
        for (int leaf = 0; leaf < n; leaf++) {
            if (hasChild[leaf]) {
                continue;
            }
            int count = 0;
            for (boolean v : visible[leaf]) {
                count += v ? 1 : 0;
            }
            int[] path = new int[count];
            int k = 0;
            for (int j = 0; j < n; j++) {
                if (visible[leaf][j]) {
                    path[k++] = j;
                }
            }
            paths.add(path);
        }
        return new TreeLayout(visible, depth, paths);
    }
}

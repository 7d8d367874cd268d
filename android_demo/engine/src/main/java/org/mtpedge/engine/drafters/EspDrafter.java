package org.mtpedge.engine.drafters;

import org.mtpedge.engine.DraftTree;
import org.mtpedge.engine.Drafter;
import org.mtpedge.engine.Engine;
import org.mtpedge.engine.GraphOutput;

/**
 * ESP: training-free drafting by mask-token probing; port of {@code mtpedge.runtime.drafters.esp}.
 *
 * <p>Every step is one graph call over {@code [root | tree nodes | k masks after each node]}: the call verifies
 * the tree, and the k mask slots under the deepest accepted node seed the next tree. Trees use "top-1
 * expansion": static (per-depth widths) or dynamic (the B - 1 best P(parent) * p_i(token) scores,
 * B = width / (k + 1)). The first step after prefill has no forecast and runs the root and its masks alone.
 */
public final class EspDrafter implements Drafter {
    private final MaskProbe probe;
    private final boolean dynamic;
    private final int nodes;
    private final int maxWidth;
    private final int[] widths;
    private int nTokens = 1;

    /** tree: "static", "dynamic" or "static:W1,W2,..."; width: slots per call (capped by the widest decode graph). */
    public EspDrafter(Engine engine, MaskSettings settings, String tree, int width) {
        this.probe = new MaskProbe(engine, settings);
        int masks = settings.slots;
        String kind = tree == null ? "static" : tree.split(":", 2)[0];
        if (!kind.equals("static") && !kind.equals("dynamic")) {
            throw new IllegalArgumentException("unknown tree '" + tree + "': use dynamic, static or static:W1,W2,...");
        }
        this.dynamic = kind.equals("dynamic");
        int maxWidth = engine.manifest.maxDecodeWidth();
        this.maxWidth = maxWidth;
        width = Math.min(width, maxWidth);
        this.nodes = width / (masks + 1);
        if (nodes < 1) {
            throw new IllegalArgumentException("a width of " + width + " slots cannot hold a root and its " + masks
                    + " mask slot(s)");
        }
        int[] given = parseWidths(tree);
        this.widths = given != null ? given : TreeBuild.defaultStaticWidths(nodes, masks);
        if (!dynamic) {
            int sum = 0;
            for (int w : widths) {
                sum += w;
            }
            if (widths.length > masks) {
                throw new IllegalArgumentException("static widths have " + widths.length + " depths but only " + masks
                        + " mask slot(s) forecast them");
            }
            if ((masks + 1) * (1 + sum) > maxWidth) {
                throw new IllegalArgumentException("static widths with " + masks + " mask slot(s) need "
                        + (masks + 1) * (1 + sum) + " slots, the widest decode graph has " + maxWidth);
            }
        }
    }

    private static int[] parseWidths(String tree) {
        if (tree == null || !tree.contains(":")) {
            return null;
        }
        String[] parts = tree.split(":", 2)[1].split(",");
        int[] out = new int[parts.length];
        for (int i = 0; i < parts.length; i++) {
            out[i] = Integer.parseInt(parts[i].trim());
            if (out[i] < 1) {
                throw new IllegalArgumentException("static tree widths must be >= 1, got " + tree);
            }
        }
        return out;
    }

    @Override
    public String name() {
        return "esp";
    }

    @Override
    public boolean loraOnSlots() {
        return probe.loraOnSlots;
    }

    @Override
    public void start(Engine engine, int[] promptIds, float[] prefillLogits) {
        probe.start(promptIds);
    }

    @Override
    public Proposal propose(int[] contextIds, int root, int lead) {
        int[] tokens;
        int[] parents;
        if (probe.forecast == null) {
            tokens = new int[] {root};
            parents = new int[] {-1};
        } else if (!dynamic) {
            TreeBuild.Pool tree = TreeBuild.staticTree(root, probe.forecastScores(), widths); // by logit = by prob
            tokens = tree.tokens;
            parents = tree.parents;
        } else {
            int fit = Math.max(1, Math.min(nodes, (maxWidth - lead) / (probe.k + 1)));
            TreeBuild.Selection tree = TreeBuild.selectTree(TreeBuild.maskPool(probe.forecastProbs(), fit - 1, root),
                    fit);
            tokens = tree.tokens;
            parents = tree.parents;
        }
        nTokens = tokens.length;
        return probe.finishTree(tokens, parents);
    }

    @Override
    public void observe(DraftTree tree, GraphOutput out, int[] path) {
        probe.observe(tree, nTokens, out, path);
    }
}

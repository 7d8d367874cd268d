package org.mtpedge.engine.drafters;

import java.util.Arrays;

import org.mtpedge.engine.DraftTree;
import org.mtpedge.engine.Drafter;
import org.mtpedge.engine.Engine;
import org.mtpedge.engine.GraphOutput;

/**
 * MTP: self-speculative decoding with a trained multi-token adapter; port of
 * {@code mtpedge.runtime.drafters.mtp}. Each step is one graph call; its token nodes are the root and drafts, its
 * SLOT nodes the adapter's learned masks (gate 1: the gated LoRA is on there, off at token nodes, so every token
 * node's logits and K/V are the base model's and verification stays lossless):
 *
 * <pre>
 *   linear     [x0, d1..dm | k masks after dm]           a rejection leaves no masks: the next step drafts nothing
 *   quadratic  [x0, d1..dm | k masks after EVERY node]   the masks under the accepted prefix give k fresh drafts
 *   tree       [x0, a TREE of drafts | k masks after the nodes most likely to end the accepted path]
 * </pre>
 *
 * The tree layout expands the {@code branch} best tokens of every kept node depth by depth (the sampler head's, or
 * the mask's plain forecast) and splits the width between drafts and mask owners by expected value
 * ({@link TreeBuild#selectTreeWithOwners}); a path ending on a node without masks drafts from its deepest ancestor
 * that has some, minus the masks the path used. {@code lookup} adds prompt-lookup chains to the same pool.
 */
public final class MtpDrafter implements Drafter {
    public static final String[] LAYOUTS = {"linear", "quadratic", "tree"};

    private final int k;
    private final String layout;
    private final float[][] masks;
    private final boolean loraOnSlots;
    private final SamplerHead head;
    private final int width;
    private final int maxWidth;
    private final int branch;
    private final double maskGain;
    private final NgramSource lookup;
    private boolean[] fromLookup = {false};
    private float[][] pendingHidden; // the next masks' hidden states (null without a sampler head's graphs)
    private float[][] pendingLogits; // the next masks' logits, or null: nothing to draft from
    private int nTokens = 1;
    private int[] owners = {0};

    /**
     * masks: mask slots k (null: as many as the adapter was trained with); sampler: draft through the sampler head
     * (false: the masks' plain argmax); candidates: rows of a mask's logits the head scores (0 = all); width,
     * branch, maskGain, lookup: the tree layout's; table: the lookup chains' static n-gram table (null: none).
     */
    public MtpDrafter(Engine engine, String layout, Integer masks, boolean sampler, int candidates, int width,
                      int branch, double maskGain, boolean lookup, StaticNgrams table) {
        if (!Arrays.asList(LAYOUTS).contains(layout)) {
            throw new IllegalArgumentException("unknown MTP layout '" + layout + "': choose linear, quadratic or tree");
        }
        if (layout.equals("tree") && (branch < 1 || maskGain < 0)) {
            throw new IllegalArgumentException("the tree layout needs branch >= 1 and mask_gain >= 0, got " + branch
                    + " and " + maskGain);
        }
        if (lookup && !layout.equals("tree")) {
            throw new IllegalArgumentException("lookup candidates need the tree layout: pass mtp_layout=tree");
        }
        MtpAdapter adapter = MtpAdapter.load(engine);
        this.k = masks == null ? adapter.k : masks;
        if (k < 1 || k > adapter.k) {
            throw new IllegalArgumentException("the adapter was trained with k = " + adapter.k + " masks: use masks=1.."
                    + adapter.k);
        }
        this.layout = layout;
        this.masks = adapter.masks(k);
        this.loraOnSlots = adapter.rank > 0;
        this.head = sampler && adapter.hasSampler ? adapter.samplerHead(engine, candidates) : null;
        int maxWidth = engine.manifest.maxDecodeWidth();
        this.maxWidth = maxWidth;
        this.width = Math.min(width, maxWidth);
        this.branch = branch;
        this.maskGain = maskGain;
        int need = layout.equals("quadratic") ? (k + 1) * (k + 1) : layout.equals("linear") ? 2 * k + 1 : k + 2;
        if (layout.equals("tree") && this.width < need) {
            throw new IllegalArgumentException("a width of " + this.width + " cannot hold a root, one draft and " + k
                    + " masks: use >= " + need);
        }
        if (need > maxWidth) {
            throw new IllegalArgumentException("the " + layout + " layout with k = " + k + " needs " + need + " slots, "
                    + "the widest decode graph has " + maxWidth + ": re-export with a wider --decode-widths or use fewer masks");
        }
        this.lookup = lookup ? new NgramSource(3, 1, Math.max(1, this.width - k - 1), 2, table) : null;
    }

    @Override
    public String name() {
        return "mtp";
    }

    @Override
    public boolean loraOnSlots() {
        return loraOnSlots;
    }

    @Override
    public void start(Engine engine, int[] promptIds, float[] prefillLogits) {
        pendingHidden = null;
        pendingLogits = null;
        if (lookup != null) {
            lookup.reset();
        }
    }

    private int[] drafts(int root) {
        if (pendingLogits == null) {
            return new int[0];
        }
        if (head != null && pendingHidden != null) {
            return head.draft(root, pendingHidden, pendingLogits);
        }
        int[] out = new int[pendingLogits.length];
        for (int j = 0; j < out.length; j++) {
            out[j] = TreeBuild.topTokens(TreeBuild.toDouble(pendingLogits[j]), 1, -1)[0];
        }
        return out;
    }

    /** The branch best tokens of mask {@code depth} after each parent: the sampler head's, or the plain forecast. */
    private TreeBuild.Expansion expand(int depth, int[] parentTokens) {
        if (head != null && pendingHidden != null) {
            return head.topNextTokens(parentTokens, pendingHidden[depth], pendingLogits[depth], branch);
        }
        double[] probs = TreeBuild.softmax(pendingLogits[depth]);
        int[] best = TreeBuild.topTokens(probs, branch, -1);
        int[][] tokens = new int[parentTokens.length][];
        double[][] p = new double[parentTokens.length][best.length];
        for (int m = 0; m < parentTokens.length; m++) {
            tokens[m] = best.clone();
            for (int b = 0; b < best.length; b++) {
                p[m][b] = probs[best[b]];
            }
        }
        return new TreeBuild.Expansion(tokens, p);
    }

    private Proposal proposeTree(int[] contextIds, int root, int width) {
        TreeBuild.Pool lookupPool = lookup == null ? null : lookup.pool(contextIds, root);
        TreeBuild.Pool expansion = pendingLogits == null ? null
                : TreeBuild.expansionPool(root, this::expand, pendingLogits.length, width - k - 1);
        int[] tokens;
        int[] parents;
        int[] chosen;
        if (lookupPool == null && expansion == null) {
            tokens = new int[] {root};
            parents = new int[] {-1};
            chosen = new int[] {0};
            owners = new int[] {0};
        } else {
            TreeBuild.Pool pool = lookupPool == null ? TreeBuild.concatPools(expansion) : expansion == null
                    ? TreeBuild.concatPools(lookupPool) : TreeBuild.concatPools(lookupPool, expansion);
            TreeBuild.OwnedTree tree = TreeBuild.selectTreeWithOwners(pool, width, k, maskGain);
            tokens = tree.tokens;
            parents = tree.parents;
            chosen = tree.chosen;
            owners = tree.owners;
        }
        int lookupSize = lookupPool == null ? 1 : lookupPool.size(); // lookup entries come first; the root is neither
        fromLookup = new boolean[chosen.length];
        for (int i = 0; i < chosen.length; i++) {
            fromLookup[i] = chosen[i] > 0 && chosen[i] < lookupSize;
        }
        nTokens = tokens.length;
        return new Proposal(TreeBuild.attachMaskSlots(tokens, parents, k, owners), tiled(owners.length));
    }

    private float[][] tiled(int count) {
        float[][] out = new float[count * k][];
        for (int r = 0; r < count; r++) {
            for (int j = 0; j < k; j++) {
                out[r * k + j] = masks[j].clone();
            }
        }
        return out;
    }

    @Override
    public Proposal propose(int[] contextIds, int root, int lead) {
        if (layout.equals("tree")) { // a tree narrower than root + one draft + its masks does not pay: the full one
            int room = maxWidth - lead;
            return proposeTree(contextIds, root, room < k + 2 ? width : Math.min(width, room));
        }
        int[] drafts = drafts(root);
        int n = drafts.length + 1;
        int[] tokens = new int[n];
        tokens[0] = root;
        System.arraycopy(drafts, 0, tokens, 1, drafts.length);
        nTokens = n;
        if (layout.equals("linear")) { // a chain of token nodes with a chain of k SLOT nodes under its last node
            int[] allTokens = Arrays.copyOf(tokens, n + k);
            int[] allParents = new int[n + k];
            for (int i = 0; i < n + k; i++) {
                allParents[i] = i - 1;
                if (i >= n) {
                    allTokens[i] = DraftTree.SLOT;
                }
            }
            return new Proposal(new DraftTree(allTokens, allParents), tiled(1));
        }
        int[] chain = new int[n];
        for (int i = 0; i < n; i++) {
            chain[i] = i - 1;
        }
        return new Proposal(TreeBuild.attachMaskSlots(tokens, chain, k), tiled(n));
    }

    @Override
    public void observe(DraftTree tree, GraphOutput out, int[] path) {
        int owner = path[path.length - 1];
        if (lookup != null) {
            lookup.record(tree, fromLookup, path);
        }
        int start;
        int used = 0;
        if (layout.equals("tree")) {
            owner = -1;
            for (int back = 0; back < Math.min(k, path.length); back++) { // the deepest path node carrying masks
                int node = path[path.length - 1 - back];
                if (TreeBuild.maskSlotStart(nTokens, node, k, owners) >= 0) {
                    owner = node;
                    used = back;
                    break;
                }
            }
            if (owner < 0) {
                pendingLogits = null;
                pendingHidden = null;
                return;
            }
            start = TreeBuild.maskSlotStart(nTokens, owner, k, owners);
        } else if (layout.equals("linear")) {
            if (owner != nTokens - 1) { // the masks hang under the last draft, which was rejected
                pendingLogits = null;
                pendingHidden = null;
                return;
            }
            start = nTokens;
        } else {
            start = TreeBuild.maskSlotStart(nTokens, owner, k);
        }
        // mask j of an owner forecasts the token j + 1 steps after it: masks the path below it used are skipped
        int count = k - used;
        pendingLogits = new float[count][];
        pendingHidden = out.hidden == null ? null : new float[count][];
        for (int j = 0; j < count; j++) {
            pendingLogits[j] = out.logitsRow(start + used + j);
            if (pendingHidden != null) {
                pendingHidden[j] = out.hiddenRow(start + used + j);
            }
        }
    }
}

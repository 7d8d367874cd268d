package org.mtpedge.engine;

import java.nio.FloatBuffer;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;

import org.mtpedge.engine.drafters.DepthRates;
import org.mtpedge.engine.drafters.MaskEmbeddings;
import org.mtpedge.engine.drafters.Ngram;
import org.mtpedge.engine.drafters.TreeBuild;
import org.mtpedge.engine.json.JsonValues;

/** The drafter port against the Python drafters: pure tree builders (ESP's and mtp's), lookup, rates, masks. */
public class DrafterGoldenTest {
    private final Map<String, Object> golden = Golden.load("drafters.json");

    private Map<String, Object> section(String name) {
        return Golden.object(golden, name);
    }

    public void testTopTokensMatchPython() {
        for (Map<String, Object> c : Golden.cases(section("trees"), "top_tokens")) {
            Check.equal(Golden.ints(c, "result"), TreeBuild.topTokens(Golden.doubles(c, "values"),
                    Golden.integer(c, "count"), Golden.integer(c, "exclude")), "top_tokens of " + c);
        }
    }

    public void testStaticTreesMatchPython() {
        for (Map<String, Object> c : Golden.cases(section("trees"), "static_tree")) {
            List<Object> rows = Golden.list(c, "logits");
            double[][] scores = new double[rows.size()][];
            for (int i = 0; i < scores.length; i++) {
                scores[i] = TreeBuild.toDouble(JsonValues.floatArray(rows.get(i), "logits"));
            }
            TreeBuild.Pool tree = TreeBuild.staticTree(Golden.integer(c, "root"), scores, Golden.ints(c, "widths"));
            Check.equal(Golden.ints(c, "tokens"), tree.tokens, "static tree tokens");
            Check.equal(Golden.ints(c, "parents"), tree.parents, "static tree parents");
        }
    }

    public void testPoolsMatchPython() {
        int index = 0;
        for (Map<String, Object> c : Golden.cases(section("trees"), "pools")) {
            String what = "pool case " + index++;
            List<Object> logits = Golden.list(c, "logits");
            double[][] probs = new double[logits.size()][];
            for (int i = 0; i < probs.length; i++) {
                probs[i] = TreeBuild.softmax(JsonValues.floatArray(logits.get(i), "logits"));
            }
            List<Object> expectedProbs = Golden.list(c, "probs");
            for (int i = 0; i < probs.length; i++) {
                Check.close(JsonValues.doubleArray(expectedProbs.get(i), "probs"), probs[i], 1e-15, what + " softmax");
            }
            TreeBuild.Pool mask = TreeBuild.maskPool(probs, Golden.integer(c, "offer"), Golden.integer(c, "root"));
            checkPool(Golden.object(c, "mask_pool"), mask, what + " mask pool");
            List<int[]> chains = new ArrayList<>();
            List<double[]> scores = new ArrayList<>();
            for (Object chain : Golden.list(c, "chains")) {
                chains.add(JsonValues.intArray(chain, "chain"));
            }
            for (Object s : Golden.list(c, "chain_scores")) {
                scores.add(JsonValues.doubleArray(s, "scores"));
            }
            TreeBuild.Pool chain = TreeBuild.chainPool(Golden.integer(c, "root"), chains, scores);
            checkPool(Golden.object(c, "chain_pool"), chain, what + " chain pool");
            checkPool(Golden.object(c, "merged"), TreeBuild.concatPools(chain, mask), what + " merged pool");
        }
    }

    private static void checkPool(Map<String, Object> expected, TreeBuild.Pool actual, String what) {
        Check.equal(Golden.ints(expected, "tokens"), actual.tokens, what + " tokens");
        Check.equal(Golden.ints(expected, "parents"), actual.parents, what + " parents");
        Check.close(Golden.doubles(expected, "scores"), actual.scores, 1e-15, what + " scores");
    }

    private static TreeBuild.Pool poolOf(Map<String, Object> json) {
        return new TreeBuild.Pool(Golden.ints(json, "tokens"), Golden.ints(json, "parents"),
                Golden.doubles(json, "scores"));
    }

    public void testSelectTreeMatchesPython() {
        for (Map<String, Object> c : Golden.cases(section("trees"), "select_tree")) {
            TreeBuild.Selection s = TreeBuild.selectTree(poolOf(Golden.object(c, "pool")), Golden.integer(c, "budget"));
            String what = "select_tree budget " + Golden.integer(c, "budget");
            Check.equal(Golden.ints(c, "tokens"), s.tokens, what + " tokens");
            Check.equal(Golden.ints(c, "parents"), s.parents, what + " parents");
            Check.equal(Golden.ints(c, "chosen"), s.chosen, what + " chosen");
            Check.close(Golden.doubles(c, "scores"), s.scores, 0.0, what + " scores after merging and capping");
        }
    }

    /** The mtp drafter's pool: children of the kept nodes depth by depth, from a table of next-token steps. */
    public void testExpansionPoolsMatchPython() {
        int index = 0;
        for (Map<String, Object> c : Golden.cases(section("owners"), "expansion_pools")) {
            List<Object> next = Golden.list(c, "next");
            TreeBuild.Expand expand = (depth, parents) -> {
                int[][] tokens = new int[parents.length][];
                double[][] probs = new double[parents.length][];
                for (int m = 0; m < parents.length; m++) {
                    Map<String, Object> row = JsonValues.object(JsonValues.array(next.get(depth), "next").get(
                            parents[m]), "next");
                    tokens[m] = Golden.ints(row, "tokens");
                    probs[m] = Golden.doubles(row, "probs");
                }
                return new TreeBuild.Expansion(tokens, probs);
            };
            TreeBuild.Pool pool = TreeBuild.expansionPool(Golden.integer(c, "root"), expand, Golden.integer(c, "depths"),
                    Golden.integer(c, "keep"));
            checkPool(Golden.object(c, "pool"), pool, "expansion pool " + index++);
        }
    }

    public void testMaskOwnersByValueMatchPython() {
        int index = 0;
        for (Map<String, Object> c : Golden.cases(section("owners"), "owners_by_value")) {
            TreeBuild.Owners split = TreeBuild.maskOwnersByValue(Golden.ints(c, "parents"), Golden.doubles(c, "scores"),
                    Golden.integer(c, "width"), Golden.integer(c, "k"), Golden.number(c, "gain"));
            String what = "owners by value case " + index++;
            Check.equal(Golden.ints(c, "kept"), split.kept, what + " kept nodes");
            Check.equal(Golden.ints(c, "owners"), split.owners, what + " owners");
        }
    }

    public void testTreesWithOwnersAndTheirSlotsMatchPython() {
        int index = 0;
        for (Map<String, Object> c : Golden.cases(section("owners"), "trees_with_owners")) {
            TreeBuild.OwnedTree tree = TreeBuild.selectTreeWithOwners(poolOf(Golden.object(c, "pool")),
                    Golden.integer(c, "width"), Golden.integer(c, "k"), Golden.number(c, "gain"));
            String what = "tree with owners case " + index++;
            Check.equal(Golden.ints(c, "tokens"), tree.tokens, what + " tokens");
            Check.equal(Golden.ints(c, "parents"), tree.parents, what + " parents");
            Check.equal(Golden.ints(c, "chosen"), tree.chosen, what + " chosen");
            Check.equal(Golden.ints(c, "owners"), tree.owners, what + " owners");
        }
        for (Map<String, Object> c : Golden.cases(section("owners"), "owned_slots")) {
            int[] tokens = Golden.ints(c, "tokens");
            int k = Golden.integer(c, "k");
            int[] owners = Golden.ints(c, "owners");
            DraftTree tree = TreeBuild.attachMaskSlots(tokens, Golden.ints(c, "parents"), k, owners);
            Check.equal(Golden.ints(c, "tree_tokens"), tree.tokens(), "owned slot tree tokens");
            Check.equal(Golden.ints(c, "tree_parents"), tree.parents(), "owned slot tree parents");
            List<Object> starts = Golden.list(c, "slot_index");
            for (int node = 0; node < tokens.length; node++) {
                Object start = starts.get(node);
                Check.equal(start == null ? -1 : (int) JsonValues.longValue(start, "slot_index"),
                        TreeBuild.maskSlotStart(tokens.length, node, k, owners), "first mask slot of node " + node);
            }
        }
    }

    public void testMaskSlotsAndDefaultWidthsMatchPython() {
        for (Map<String, Object> c : Golden.cases(section("trees"), "mask_slots")) {
            DraftTree tree = TreeBuild.attachMaskSlots(Golden.ints(c, "tokens"), Golden.ints(c, "parents"),
                    Golden.integer(c, "k"));
            Check.equal(Golden.ints(c, "tree_tokens"), tree.tokens(), "slot tree tokens");
            Check.equal(Golden.ints(c, "tree_parents"), tree.parents(), "slot tree parents");
        }
        for (Map<String, Object> c : Golden.cases(section("trees"), "default_widths")) {
            Check.equal(Golden.ints(c, "widths"), TreeBuild.defaultStaticWidths(Golden.integer(c, "nodes"),
                    Golden.integer(c, "k")), "default widths " + c);
        }
    }

    public void testNgramContinuationsMatchPython() {
        for (Map<String, Object> c : Golden.cases(section("ngram"), "continuations")) {
            List<int[]> found = Ngram.continuations(Golden.ints(c, "context"), Golden.integer(c, "max_ngram"),
                    Golden.integer(c, "min_ngram"), Golden.integer(c, "length"), Golden.integer(c, "max_matches"));
            List<Object> expected = Golden.list(c, "found");
            Check.equal(expected.size(), found.size(), "continuations of " + c);
            for (int i = 0; i < found.size(); i++) {
                Check.equal(JsonValues.intArray(expected.get(i), "found"), found.get(i), "continuation " + i + " of " + c);
            }
        }
    }

    public void testDepthRatesMatchPython() {
        Map<String, Object> spec = Golden.object(section("ngram"), "depth_rates");
        DepthRates rates = new DepthRates(Golden.integer(spec, "max_depth"));
        for (Map<String, Object> step : Golden.cases(spec, "steps")) {
            rates.record(Golden.ints(step, "depths"), bools(step, "parent_accepted"), bools(step, "accepted"));
            Check.close(Golden.doubles(step, "rates"), rates.rates(), 1e-15, "rates");
            Check.close(Golden.doubles(step, "chain_scores_4_half"), rates.chainScores(4, 0.5), 1e-15, "chain scores");
        }
    }

    private static boolean[] bools(Map<String, Object> map, String key) {
        List<Object> list = Golden.list(map, key);
        boolean[] out = new boolean[list.size()];
        for (int i = 0; i < out.length; i++) {
            out[i] = Boolean.TRUE.equals(list.get(i));
        }
        return out;
    }

    public void testMaskEmbeddingsMatchPython() {
        Map<String, Object> spec = section("masks");
        int rows = Golden.integer(spec, "rows");
        int dim = Golden.integer(spec, "dim");
        EmbeddingTable table = new EmbeddingTable(rows, dim, FloatBuffer.wrap(Golden.floats(spec, "table")));
        for (Map<String, Object> c : Golden.cases(spec, "cases")) {
            String what = "masks " + c.get("init") + " k=" + c.get("slots") + " rate=" + c.get("rate");
            MaskEmbeddings masks = new MaskEmbeddings(JsonValues.stringField(c, "init", "case"),
                    Golden.integer(c, "slots"), Golden.number(c, "rate"), table);
            masks.start(Golden.ints(c, "prompt"));
            List<Object> history = Golden.list(c, "for_two_owners");
            List<Object> observed = Golden.list(c, "observed");
            for (int step = 0; step < history.size(); step++) {
                if (step > 0) {
                    masks.observeTokens(JsonValues.intArray(observed.get(step - 1), "observed"));
                }
                float[][] owners = masks.forOwners(2);
                float[] flat = new float[owners.length * dim];
                for (int i = 0; i < owners.length; i++) {
                    System.arraycopy(owners[i], 0, flat, i * dim, dim);
                }
                // double sums in another order may move a float32 by one ulp
                Check.close(JsonValues.floatArray(history.get(step), "masks"), flat, 1e-6, what + " step " + step);
            }
        }
    }
}

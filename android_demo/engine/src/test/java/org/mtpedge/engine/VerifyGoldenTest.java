package org.mtpedge.engine;

import java.nio.FloatBuffer;
import java.util.Arrays;
import java.util.List;
import java.util.Map;

import org.mtpedge.engine.json.JsonValues;

/**
 * Model outputs -> accepted path, bonus token (reading all rows, and only the leading chain's) and the cache rows a
 * commit writes, as the Python runtime.
 */
public class VerifyGoldenTest {
    public void testGreedyVerifyAndCommitMatchPython() {
        int index = 0;
        int stopped = 0; // cases whose path the trusted rows cut short
        for (Map<String, Object> c : Golden.cases(Golden.load("verify.json"), "cases")) {
            String what = "case " + index++;
            DraftTree tree = new DraftTree(Golden.ints(c, "tokens"), Golden.ints(c, "parents"));
            int vocab = Golden.integer(c, "vocab");
            float[] logits = Golden.floats(c, "logits");
            GraphOutput out = new GraphOutput(tree.size(), vocab, logits, tree.size(), new FloatBuffer[0],
                    new FloatBuffer[0], 0);
            Verifier.Result result = Verifier.verify(tree, out, Sampler::argmax);
            Check.equal(Golden.ints(c, "path"), result.path, what + " path of " + tree);
            Check.equal(Golden.integer(c, "next_token"), result.nextToken, what + " next token");
            Check.equal(Golden.ints(c, "accepted_tokens"), Verifier.acceptedTokens(tree, result.path), what + " drafts");
            int trusted = Golden.integer(c, "trusted");
            Check.equal(trusted, Engine.leadingChain(tree.parents()), what + " leading chain of " + tree);
            Verifier.Result within = Verifier.verify(tree, out, Sampler::argmax, trusted);
            Check.equal(Golden.ints(c, "trusted_path"), within.path, what + " path reading rows [0, " + trusted + ")");
            Check.equal(Golden.integer(c, "trusted_next_token"), within.nextToken, what + " next token, trusted rows");
            stopped += within.path.length < result.path.length ? 1 : 0;

            Map<String, Object> kv = Golden.object(c, "kv");
            int layers = Golden.integer(kv, "layers");
            int heads = Golden.integer(kv, "heads");
            int headDim = Golden.integer(kv, "head_dim");
            int context = Golden.integer(kv, "context");
            int width = Golden.integer(kv, "width");
            KvCache cache = new KvCache(layers, heads, context, headDim);
            // reach n_past the way the engine does: by commits (of zero rows here)
            int nPast = Golden.integer(kv, "n_past");
            FloatBuffer[] zeros = new FloatBuffer[layers];
            for (int l = 0; l < layers; l++) {
                zeros[l] = FloatBuffer.allocate(heads * nPast * headDim);
            }
            int[] first = new int[nPast];
            for (int i = 0; i < nPast; i++) {
                first[i] = i;
            }
            cache.commitAcceptedKv(zeros, zeros, nPast, first);
            cache.commitAcceptedKv(buffers(kv, "new_keys"), buffers(kv, "new_values"), width, result.path);
            Check.equal(Golden.integer(kv, "n_past_after"), cache.nPast(), what + " n_past after commit");
            List<Object> keysAfter = Golden.list(kv, "keys_after");
            List<Object> valuesAfter = Golden.list(kv, "values_after");
            for (int l = 0; l < layers; l++) {
                Check.exact(JsonValues.floatArray(keysAfter.get(l), "keys"), prefix(cache.keys(l), heads, context,
                        headDim, cache.nPast()), what + " keys layer " + l);
                Check.exact(JsonValues.floatArray(valuesAfter.get(l), "values"), prefix(cache.values(l), heads,
                        context, headDim, cache.nPast()), what + " values layer " + l);
            }
        }
        Check.isTrue(stopped > 0, "no golden case has a path that the trusted rows cut short");
    }

    public void testCommitBeyondTheContextIsRefused() {
        KvCache cache = new KvCache(1, 1, 4, 2);
        FloatBuffer[] rows = {FloatBuffer.allocate(8)};
        cache.commitAcceptedKv(rows, rows, 4, new int[] {0, 1, 2});
        Check.throwsError(ContextOverflowException.class, () -> cache.commitAcceptedKv(rows, rows, 4, new int[] {0, 1}),
                "5 positions in a context of 4");
        Check.equal(3, cache.nPast(), "n_past after a refused commit");
    }

    private static FloatBuffer[] buffers(Map<String, Object> kv, String key) {
        List<Object> layers = Golden.list(kv, key);
        FloatBuffer[] out = new FloatBuffer[layers.size()];
        for (int l = 0; l < out.length; l++) {
            out[l] = FloatBuffer.wrap(JsonValues.floatArray(layers.get(l), key));
        }
        return out;
    }

    /** cache[:, :, :nPast] of a (1, heads, context, headDim) buffer, row-major, as numpy's ravel. */
    private static float[] prefix(FloatBuffer buffer, int heads, int context, int headDim, int nPast) {
        float[] all = new float[heads * context * headDim];
        buffer.get(all);
        float[] out = new float[heads * nPast * headDim];
        for (int h = 0; h < heads; h++) {
            System.arraycopy(all, h * context * headDim, out, h * nPast * headDim, nPast * headDim);
        }
        return Arrays.copyOf(out, out.length);
    }
}

package org.mtpedge.engine;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;

import org.mtpedge.engine.json.JsonValues;
import org.mtpedge.engine.tokenizer.BpeTokenizer;
import org.mtpedge.engine.tokenizer.StreamDecoder;

/** The tokenizer bridge against the Hugging Face `tokenizers` library on the same strings. */
public class TokenizerGoldenTest {
    public void testGpt2StyleTokenizerMatchesPython() {
        check("tokenizer_gpt2");
    }

    public void testQwenStyleTokenizerMatchesPython() {
        check("tokenizer_qwen");
    }

    /** The real SmolLM2 tokenizer (3.5 MB, not in the repository): runs where the exported bundle exists. */
    public void testRealSmolLm2TokenizerMatchesPython() {
        Path bundle = DecodeReplayTest.realBundle();
        if (bundle == null) {
            throw new TestRunner.Skip("no SmolLM2 bundle here (set MTPEDGE_BUNDLE to run it)");
        }
        BpeTokenizer tokenizer = BpeTokenizer.load(bundle.resolve("tokenizer.json"));
        checkEncode(tokenizer, Golden.load("tokenizer_smollm2_cases.json"), "smollm2");
    }

    private static void check(String name) {
        BpeTokenizer tokenizer = BpeTokenizer.fromJson(Golden.text(name + "/tokenizer.json"));
        Map<String, Object> cases = Golden.load(name + "/cases.json");
        checkEncode(tokenizer, cases, name);
        for (Map<String, Object> c : Golden.cases(cases, "stream")) {
            StreamDecoder stream = new StreamDecoder(tokenizer);
            List<Object> deltas = Golden.list(c, "deltas");
            int[] ids = Golden.ints(c, "ids");
            for (int i = 0; i < ids.length; i++) {
                Check.equal(deltas.get(i), stream.push(new int[] {ids[i]}), name + " stream delta " + i);
            }
        }
    }

    private static void checkEncode(BpeTokenizer tokenizer, Map<String, Object> cases, String name) {
        for (Map<String, Object> c : Golden.cases(cases, "encode")) {
            String text = JsonValues.stringField(c, "text", "case");
            String what = name + " text '" + text + "'";
            int[] ids = Golden.ints(c, "ids");
            Check.equal(ids, tokenizer.encode(text, false), what + " ids");
            Check.equal(Golden.ints(c, "ids_with_special"), tokenizer.encode(text, true), what + " ids with specials");
            Check.equal(c.get("decoded"), tokenizer.decode(ids, true), what + " decoded");
            Check.equal(c.get("decoded_with_special"), tokenizer.decode(ids, false), what + " decoded with specials");
        }
    }

    public void testSpecialTokenMatchingPrefersTheEarliestThenLongest() {
        String json = "{\"added_tokens\":[{\"id\":3,\"content\":\"<a>\",\"special\":true},"
                + "{\"id\":4,\"content\":\"<a>b\",\"special\":true}],\"normalizer\":null,"
                + "\"pre_tokenizer\":{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":true},"
                + "\"post_processor\":null,\"decoder\":{\"type\":\"ByteLevel\"},"
                + "\"model\":{\"type\":\"BPE\",\"vocab\":{\"x\":0,\"b\":1,\"Ġ\":2},\"merges\":[]}}";
        BpeTokenizer tokenizer = BpeTokenizer.fromJson(json);
        Check.equal(new int[] {0, 4, 3}, tokenizer.encode("x<a>b<a>", false), "added tokens");
    }

    static boolean exists(Path p) {
        return p != null && Files.isRegularFile(p);
    }
}

package org.mtpedge.engine.tokenizer;

import java.util.Collections;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import org.mtpedge.engine.json.JsonValues;

/**
 * The pre-tokenizers of Hugging Face tokenizer.json files that byte-level BPE models use: ByteLevel, Split
 * (regex, "Isolated"), Digits, and a Sequence of them. Each step splits every piece into smaller pieces.
 */
final class PreTokenizer {
    /** GPT-2's split: contractions, letter runs, digit runs, other runs, and whitespace (keeping one before a word). */
    static final String GPT2_PATTERN =
            "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

    private interface Step {
        List<String> split(String piece);
    }

    private final List<Step> steps;
    /** True when a ByteLevel step maps pieces to byte characters (else BPE sees raw text). */
    final boolean byteLevel;

    private PreTokenizer(List<Step> steps, boolean byteLevel) {
        this.steps = steps;
        this.byteLevel = byteLevel;
    }

    static PreTokenizer fromJson(Object spec) {
        List<Step> steps = new ArrayList<>();
        boolean[] byteLevel = {false};
        if (spec != null) {
            add(JsonValues.object(spec, "pre_tokenizer"), steps, byteLevel);
        }
        return new PreTokenizer(steps, byteLevel[0]);
    }

    private static void add(Map<String, Object> spec, List<Step> steps, boolean[] byteLevel) {
        String type = JsonValues.stringField(spec, "type", "pre_tokenizer");
        switch (type) {
            case "Sequence":
                for (Object sub : JsonValues.arrayField(spec, "pretokenizers", "pre_tokenizer")) {
                    add(JsonValues.object(sub, "pre_tokenizer"), steps, byteLevel);
                }
                break;
            case "ByteLevel":
                if (JsonValues.boolField(spec, "add_prefix_space", false)) {
                    steps.add(piece -> Collections.singletonList(piece.startsWith(" ") ? piece : " " + piece));
                }
                if (JsonValues.boolField(spec, "use_regex", true)) {
                    Pattern gpt2 = Pattern.compile(GPT2_PATTERN, Pattern.UNICODE_CHARACTER_CLASS);
                    steps.add(piece -> isolate(gpt2, piece));
                }
                byteLevel[0] = true;
                break;
            case "Split": {
                Map<String, Object> pattern = JsonValues.objectField(spec, "pattern", "Split pre_tokenizer");
                String regex = pattern.containsKey("Regex") ? JsonValues.stringField(pattern, "Regex", "Split")
                        : Pattern.quote(JsonValues.stringField(pattern, "String", "Split"));
                String behavior = JsonValues.stringField(spec, "behavior", "Split pre_tokenizer");
                if (!behavior.equals("Isolated") || JsonValues.boolField(spec, "invert", false)) {
                    throw new TokenizerException("Split pre-tokenizer with behavior " + behavior + " is not supported "
                            + "(only Isolated, not inverted)");
                }
                Pattern compiled = Pattern.compile(regex, Pattern.UNICODE_CHARACTER_CLASS);
                steps.add(piece -> isolate(compiled, piece));
                break;
            }
            case "Digits": {
                Pattern digits = Pattern.compile(JsonValues.boolField(spec, "individual_digits", false)
                        ? "\\p{N}" : "\\p{N}+", Pattern.UNICODE_CHARACTER_CLASS);
                steps.add(piece -> isolate(digits, piece));
                break;
            }
            default:
                throw new TokenizerException("pre-tokenizer type " + type + " is not supported by this app "
                        + "(supported: ByteLevel, Split, Digits, Sequence)");
        }
    }

    /** Matches become pieces of their own, and so does the text between matches. */
    private static List<String> isolate(Pattern pattern, String piece) {
        List<String> out = new ArrayList<>();
        Matcher m = pattern.matcher(piece);
        int last = 0;
        while (m.find()) {
            if (m.end() == m.start()) {
                continue;
            }
            if (m.start() > last) {
                out.add(piece.substring(last, m.start()));
            }
            out.add(m.group());
            last = m.end();
        }
        if (last < piece.length()) {
            out.add(piece.substring(last));
        }
        return out;
    }

    List<String> split(String text) {
        List<String> pieces = new ArrayList<>(Collections.singletonList(text));
        for (Step step : steps) {
            List<String> next = new ArrayList<>();
            for (String piece : pieces) {
                next.addAll(step.split(piece));
            }
            pieces = next;
        }
        List<String> out = new ArrayList<>(pieces.size());
        for (String piece : pieces) {
            if (!piece.isEmpty()) {
                out.add(byteLevel ? ByteLevel.encode(piece) : piece);
            }
        }
        return out;
    }
}

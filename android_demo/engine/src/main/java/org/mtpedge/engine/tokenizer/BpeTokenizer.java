package org.mtpedge.engine.tokenizer;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.text.Normalizer;
import java.util.Collections;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

import org.mtpedge.engine.json.Json;
import org.mtpedge.engine.json.JsonValues;

/**
 * The tokenizer bridge: a byte-level BPE tokenizer read from a Hugging Face tokenizer.json, matching the
 * {@code tokenizers} library that the Python runtime uses (golden-tested on the same strings).
 *
 * <p>Supported: added/special tokens (matched before everything else, longest first), normalizer none / NFC /
 * NFKC, pre-tokenizers ByteLevel / Split / Digits / Sequence, model BPE (merges by rank), decoder ByteLevel,
 * post-processor TemplateProcessing (special tokens around a single sequence). Anything else is refused by name.
 */
public final class BpeTokenizer {
    private final Map<String, Integer> vocab;
    private final String[] idToToken;
    private final Map<String, Integer> mergeRanks;
    private final boolean ignoreMerges;
    private final List<String> addedContents;
    private final Map<String, Integer> added;
    private final boolean[] isSpecial;
    private final boolean[] isAdded;
    private final Normalizer.Form normalizer;
    private final PreTokenizer preTokenizer;
    private final int[] prefixIds;
    private final int[] suffixIds;
    private final Map<String, int[]> cache = new HashMap<>();

    private BpeTokenizer(Map<String, Object> spec) {
        Map<String, Object> model = JsonValues.objectField(spec, "model", "tokenizer.json");
        String type = String.valueOf(model.get("type"));
        if (!type.equals("BPE")) {
            throw new TokenizerException("tokenizer model " + type + " is not supported (only byte-level BPE)");
        }
        if (JsonValues.boolField(model, "byte_fallback", false)) {
            throw new TokenizerException("BPE with byte_fallback (SentencePiece-style) is not supported");
        }
        Map<String, Object> vocabJson = JsonValues.objectField(model, "vocab", "model");
        vocab = new HashMap<>(vocabJson.size() * 2);
        int maxId = 0;
        for (Map.Entry<String, Object> e : vocabJson.entrySet()) {
            int id = Math.toIntExact(JsonValues.longValue(e.getValue(), "vocab entry"));
            vocab.put(e.getKey(), id);
            maxId = Math.max(maxId, id);
        }
        List<Object> addedJson = spec.get("added_tokens") == null ? Collections.emptyList()
                : JsonValues.arrayField(spec, "added_tokens", "tokenizer.json");
        for (Object a : addedJson) {
            maxId = Math.max(maxId, JsonValues.intField(JsonValues.object(a, "added token"), "id", "added token"));
        }
        idToToken = new String[maxId + 1];
        for (Map.Entry<String, Integer> e : vocab.entrySet()) {
            idToToken[e.getValue()] = e.getKey();
        }
        isSpecial = new boolean[maxId + 1];
        isAdded = new boolean[maxId + 1];
        added = new HashMap<>();
        addedContents = new ArrayList<>();
        for (Object a : addedJson) {
            Map<String, Object> token = JsonValues.object(a, "added token");
            int id = JsonValues.intField(token, "id", "added token");
            String content = JsonValues.stringField(token, "content", "added token");
            idToToken[id] = content;
            isAdded[id] = true;
            isSpecial[id] = JsonValues.boolField(token, "special", false);
            added.put(content, id);
            addedContents.add(content);
        }
        addedContents.sort((x, y) -> y.length() - x.length()); // longest first at one position
        mergeRanks = new HashMap<>();
        List<Object> merges = JsonValues.arrayField(model, "merges", "model");
        for (int rank = 0; rank < merges.size(); rank++) {
            Object m = merges.get(rank);
            String pair;
            if (m instanceof String) {
                pair = (String) m;
            } else {
                List<Object> parts = JsonValues.array(m, "merge");
                pair = parts.get(0) + " " + parts.get(1);
            }
            mergeRanks.putIfAbsent(pair, rank);
        }
        ignoreMerges = JsonValues.boolField(model, "ignore_merges", false);
        normalizer = normalizerOf(spec.get("normalizer"));
        preTokenizer = PreTokenizer.fromJson(spec.get("pre_tokenizer"));
        if (!preTokenizer.byteLevel) {
            throw new TokenizerException("only byte-level BPE tokenizers are supported (the pre-tokenizer has no "
                    + "ByteLevel step)");
        }
        int[][] template = postProcessor(spec.get("post_processor"));
        prefixIds = template[0];
        suffixIds = template[1];
    }

    public static BpeTokenizer fromJson(String json) {
        return new BpeTokenizer(JsonValues.object(Json.parse(json), "tokenizer.json"));
    }

    public static BpeTokenizer load(Path file) {
        try {
            return fromJson(new String(Files.readAllBytes(file), StandardCharsets.UTF_8));
        } catch (IOException err) {
            throw new TokenizerException("cannot read " + file + ": " + err.getMessage());
        }
    }

    private static Normalizer.Form normalizerOf(Object spec) {
        if (spec == null) {
            return null;
        }
        String type = String.valueOf(JsonValues.object(spec, "normalizer").get("type"));
        switch (type) {
            case "NFC": return Normalizer.Form.NFC;
            case "NFKC": return Normalizer.Form.NFKC;
            case "NFD": return Normalizer.Form.NFD;
            case "NFKD": return Normalizer.Form.NFKD;
            default:
                throw new TokenizerException("normalizer " + type + " is not supported (none, NFC, NFKC, NFD, NFKD)");
        }
    }

    /** Special-token ids around a single sequence: [prefix, suffix]. */
    private int[][] postProcessor(Object spec) {
        if (spec == null) {
            return new int[][] {new int[0], new int[0]};
        }
        Map<String, Object> map = JsonValues.object(spec, "post_processor");
        String type = String.valueOf(map.get("type"));
        if (type.equals("ByteLevel")) {
            return new int[][] {new int[0], new int[0]};
        }
        if (type.equals("Sequence")) {
            int[][] result = {new int[0], new int[0]};
            for (Object sub : JsonValues.arrayField(map, "processors", "post_processor")) {
                int[][] part = postProcessor(sub);
                if (part[0].length + part[1].length > 0) {
                    result = part;
                }
            }
            return result;
        }
        if (!type.equals("TemplateProcessing")) {
            throw new TokenizerException("post-processor " + type + " is not supported");
        }
        List<Integer> prefix = new ArrayList<>();
        List<Integer> suffix = new ArrayList<>();
        boolean seenSequence = false;
        for (Object item : JsonValues.arrayField(map, "single", "post_processor")) {
            Map<String, Object> piece = JsonValues.object(item, "template piece");
            if (piece.containsKey("Sequence")) {
                seenSequence = true;
            } else {
                Map<String, Object> special = JsonValues.objectField(piece, "SpecialToken", "template piece");
                String name = JsonValues.stringField(special, "id", "SpecialToken");
                Integer id = added.containsKey(name) ? added.get(name) : vocab.get(name);
                if (id == null) {
                    throw new TokenizerException("post-processor names unknown special token " + name);
                }
                (seenSequence ? suffix : prefix).add(id);
            }
        }
        return new int[][] {prefix.stream().mapToInt(i -> i).toArray(), suffix.stream().mapToInt(i -> i).toArray()};
    }

    public int vocabSize() {
        return idToToken.length;
    }

    /** Token ids of {@code text}; addSpecialTokens applies the post-processor (e.g. a BOS token). */
    public int[] encode(String text, boolean addSpecialTokens) {
        List<Integer> ids = new ArrayList<>();
        if (addSpecialTokens) {
            for (int id : prefixIds) {
                ids.add(id);
            }
        }
        int start = 0;
        while (start <= text.length()) {
            int bestAt = text.length();
            String best = null;
            for (String content : addedContents) {
                int at = text.indexOf(content, start);
                if (at >= 0 && at < bestAt) { // earliest wins; at equal start the longer (sorted first) wins
                    bestAt = at;
                    best = content;
                }
            }
            encodePlain(text.substring(start, bestAt), ids);
            if (best == null) {
                break;
            }
            ids.add(added.get(best));
            start = bestAt + best.length();
        }
        if (addSpecialTokens) {
            for (int id : suffixIds) {
                ids.add(id);
            }
        }
        return ids.stream().mapToInt(i -> i).toArray();
    }

    private void encodePlain(String text, List<Integer> ids) {
        if (text.isEmpty()) {
            return;
        }
        String normalized = normalizer == null ? text : Normalizer.normalize(text, normalizer);
        for (String word : preTokenizer.split(normalized)) {
            for (int id : bpe(word)) {
                ids.add(id);
            }
        }
    }

    private int[] bpe(String word) {
        int[] cached = cache.get(word);
        if (cached != null) {
            return cached;
        }
        int[] result;
        if (ignoreMerges && vocab.containsKey(word)) {
            result = new int[] {vocab.get(word)};
        } else {
            List<String> parts = new ArrayList<>();
            for (int i = 0; i < word.length(); ) {
                int end = word.offsetByCodePoints(i, 1);
                parts.add(word.substring(i, end));
                i = end;
            }
            while (parts.size() > 1) { // merge the lowest-ranked adjacent pair, leftmost first, until none applies
                int bestRank = Integer.MAX_VALUE;
                int bestAt = -1;
                for (int i = 0; i + 1 < parts.size(); i++) {
                    Integer rank = mergeRanks.get(parts.get(i) + " " + parts.get(i + 1));
                    if (rank != null && rank < bestRank) {
                        bestRank = rank;
                        bestAt = i;
                    }
                }
                if (bestAt < 0) {
                    break;
                }
                parts.set(bestAt, parts.get(bestAt) + parts.remove(bestAt + 1));
            }
            result = new int[parts.size()];
            for (int i = 0; i < result.length; i++) {
                Integer id = vocab.get(parts.get(i));
                if (id == null) {
                    throw new TokenizerException("no vocabulary entry for piece '" + parts.get(i) + "' of '" + word
                            + "': the tokenizer.json is inconsistent");
                }
                result[i] = id;
            }
        }
        if (cache.size() < 100_000) {
            cache.put(word, result);
        }
        return result;
    }

    /** Text of {@code ids}; invalid UTF-8 (a character split across tokens) becomes U+FFFD, as in Python. */
    public String decode(int[] ids, boolean skipSpecialTokens) {
        ByteArrayOutputStream bytes = new ByteArrayOutputStream();
        for (int id : ids) {
            if (id < 0 || id >= idToToken.length || idToToken[id] == null) {
                throw new TokenizerException("token id " + id + " is not in the vocabulary");
            }
            if (skipSpecialTokens && isSpecial[id]) {
                continue;
            }
            if (isAdded[id]) {
                byte[] raw = idToToken[id].getBytes(StandardCharsets.UTF_8);
                bytes.write(raw, 0, raw.length);
            } else {
                ByteLevel.decodeInto(idToToken[id], bytes);
            }
        }
        return new String(bytes.toByteArray(), StandardCharsets.UTF_8);
    }
}

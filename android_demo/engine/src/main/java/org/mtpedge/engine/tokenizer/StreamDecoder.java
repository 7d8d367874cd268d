package org.mtpedge.engine.tokenizer;

import java.util.Arrays;

/** Turns a growing list of ids into text deltas, holding back incomplete UTF-8 sequences (as the Python one). */
public final class StreamDecoder {
    private final BpeTokenizer tokenizer;
    private int[] ids = new int[0];
    private String text = "";

    public StreamDecoder(BpeTokenizer tokenizer) {
        this.tokenizer = tokenizer;
    }

    public String push(int[] more) {
        int old = ids.length;
        ids = Arrays.copyOf(ids, old + more.length);
        System.arraycopy(more, 0, ids, old, more.length);
        String decoded = tokenizer.decode(ids, true);
        if (decoded.endsWith("\uFFFD")) {
            return "";
        }
        String delta = decoded.startsWith(text) ? decoded.substring(text.length()) : decoded;
        text = decoded;
        return delta;
    }

    public String text() {
        return text;
    }
}

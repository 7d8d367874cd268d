package org.mtpedge.engine.tokenizer;

import java.io.ByteArrayOutputStream;
import java.nio.charset.StandardCharsets;

/** GPT-2's reversible map between bytes and printable characters, used by byte-level BPE tokenizers. */
final class ByteLevel {
    private static final char[] BYTE_TO_CHAR = new char[256];
    private static final int[] CHAR_TO_BYTE = new int[512];

    static {
        java.util.Arrays.fill(CHAR_TO_BYTE, -1);
        int extra = 0;
        for (int b = 0; b < 256; b++) {
            boolean printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
            char c = printable ? (char) b : (char) (256 + extra++);
            BYTE_TO_CHAR[b] = c;
            CHAR_TO_BYTE[c] = b;
        }
    }

    private ByteLevel() {
    }

    static String encode(String text) {
        byte[] bytes = text.getBytes(StandardCharsets.UTF_8);
        StringBuilder out = new StringBuilder(bytes.length);
        for (byte b : bytes) {
            out.append(BYTE_TO_CHAR[b & 0xff]);
        }
        return out.toString();
    }

    /** Appends the bytes a byte-level token stands for; characters outside the map go in as UTF-8. */
    static void decodeInto(String token, ByteArrayOutputStream out) {
        for (int i = 0; i < token.length(); i++) {
            char c = token.charAt(i);
            int b = c < CHAR_TO_BYTE.length ? CHAR_TO_BYTE[c] : -1;
            if (b >= 0) {
                out.write(b);
            } else {
                byte[] raw = String.valueOf(c).getBytes(StandardCharsets.UTF_8);
                out.write(raw, 0, raw.length);
            }
        }
    }
}

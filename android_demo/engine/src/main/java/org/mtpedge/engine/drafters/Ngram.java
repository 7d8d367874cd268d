package org.mtpedge.engine.drafters;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

/**
 * Prompt lookup: continuations of the latest earlier occurrences of the context's last n tokens; port of
 * {@code mtpedge.runtime.ngram}. The longest n (max down to min) that occurs earlier wins; its matches are taken
 * newest first, identical continuations kept once.
 */
public final class Ngram {
    private Ngram() {
    }

    /** The n-gram length that matched (0: none) and its continuations; port of {@code ngram.ngram_match}. */
    public static final class Match {
        private final int n;
        private final List<int[]> found;

        Match(int n, List<int[]> found) {
            this.n = n;
            this.found = found;
        }

        public int n() {
            return n;
        }

        public List<int[]> found() {
            return found;
        }
    }

    public static List<int[]> continuations(int[] context, int maxNgram, int minNgram, int length, int maxMatches) {
        return match(context, maxNgram, minNgram, length, maxMatches).found();
    }

    public static Match match(int[] context, int maxNgram, int minNgram, int length, int maxMatches) {
        if (minNgram < 1 || minNgram > maxNgram) {
            throw new IllegalArgumentException("n-gram sizes must satisfy 1 <= min_ngram <= max_ngram, got " + minNgram
                    + ", " + maxNgram);
        }
        int size = context.length;
        for (int n = Math.min(maxNgram, size - 1); n >= minNgram; n--) {
            List<int[]> found = new ArrayList<>();
            // windows start at i and leave at least one token after them (so the suffix itself is excluded)
            for (int start = size - 1 - n; start >= 0; start--) {
                if (!matchesSuffix(context, start, n)) {
                    continue;
                }
                int[] cont = Arrays.copyOfRange(context, start + n, Math.min(size, start + n + length));
                boolean duplicate = false;
                for (int[] f : found) {
                    duplicate |= Arrays.equals(f, cont);
                }
                if (!duplicate) {
                    found.add(cont);
                    if (found.size() == maxMatches) {
                        break;
                    }
                }
            }
            if (!found.isEmpty()) {
                return new Match(n, found);
            }
        }
        return new Match(0, new ArrayList<>());
    }

    private static boolean matchesSuffix(int[] context, int start, int n) {
        int suffix = context.length - n;
        for (int i = 0; i < n; i++) {
            if (context[start + i] != context[suffix + i]) {
                return false;
            }
        }
        return true;
    }
}

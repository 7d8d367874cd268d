package org.mtpedge.engine.drafters;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.Map;

import org.mtpedge.engine.BundleException;
import org.mtpedge.engine.Engine;
import org.mtpedge.engine.Npy;

/**
 * A static n-gram table: after each n-gram of the model's own answers, the token that most often followed it; port
 * of {@code mtpedge.runtime.static_ngrams}. Keys are 64-bit FNV-1a hashes of the n-gram and its length, sorted as
 * unsigned numbers; the bundle holds the table its export found for its tokenizer (manifest extras
 * "static_ngrams").
 */
public final class StaticNgrams {
    static final String EXTRAS_KEY = "static_ngrams";
    private static final String FORMAT = "mtpedge-static-ngrams";
    private static final long FNV_OFFSET = 0xCBF29CE484222325L;
    private static final long FNV_PRIME = 0x100000001B3L;
    private final long[] keys;
    private final int[] nextIds;
    private final int[] orders; // longest first

    StaticNgrams(long[] keys, int[] nextIds, int[] orders) {
        this.keys = keys;
        this.nextIds = nextIds;
        this.orders = orders;
    }

    /** The bundle's table (null if the bundle has none). */
    static StaticNgrams forBundle(Engine engine) {
        Object name = engine.manifest.extras.get(EXTRAS_KEY);
        if (!(name instanceof String) || engine.folder == null) {
            return null;
        }
        Path path = engine.folder.resolve((String) name);
        if (!Files.isRegularFile(path)) {
            throw new BundleException(path + " is missing (the manifest names it): push the whole bundle folder");
        }
        return read(path, engine.config.vocabSize);
    }

    static StaticNgrams read(Path path, int vocabSize) {
        Map<String, byte[]> entries = Npy.readEntries(path);
        for (String name : new String[] {"format", "version", "keys", "next_ids", "orders"}) {
            if (!entries.containsKey(name)) {
                throw new BundleException(path + " is not a static n-gram table (no " + name + "): re-run `mtpedge "
                        + "export`");
            }
        }
        String format = Npy.parseText(entries.get("format"), path + ":format");
        long version = Npy.parseLongs(entries.get("version"), path + ":version")[0];
        if (!FORMAT.equals(format) || version != 1) {
            throw new BundleException(path + " is " + format + " version " + version + ", not " + FORMAT
                    + " version 1: re-run `mtpedge export` with this app's mtpedge");
        }
        long[] keys = Npy.parseLongs(entries.get("keys"), path + ":keys");
        long[] next = Npy.parseLongs(entries.get("next_ids"), path + ":next_ids");
        long[] orders = Npy.parseLongs(entries.get("orders"), path + ":orders");
        if (keys.length != next.length || orders.length == 0) {
            throw new BundleException(path + " is damaged (keys and next ids differ in length): re-run `mtpedge "
                    + "export`");
        }
        int[] nextIds = new int[next.length];
        for (int i = 0; i < next.length; i++) {
            if (next[i] < 0 || next[i] >= vocabSize || (i > 0 && Long.compareUnsigned(keys[i - 1], keys[i]) >= 0)) {
                throw new BundleException(path + " is damaged (unsorted keys or ids outside the vocabulary): re-run "
                        + "`mtpedge export`");
            }
            nextIds[i] = (int) next[i];
        }
        int[] sorted = new int[orders.length];
        for (int i = 0; i < orders.length; i++) {
            if (orders[i] < 1) {
                throw new BundleException(path + " is damaged (n-gram order " + orders[i] + ")");
            }
            sorted[i] = (int) orders[i];
        }
        Arrays.sort(sorted);
        int[] longestFirst = new int[sorted.length];
        for (int i = 0; i < sorted.length; i++) {
            longestFirst[i] = sorted[sorted.length - 1 - i];
        }
        return new StaticNgrams(keys, nextIds, longestFirst);
    }

    /** The key of tokens[from .. from + n): FNV-1a over the length and the ids (Java's long product wraps). */
    static long key(int[] tokens, int from, int n) {
        long key = FNV_OFFSET ^ n;
        for (int i = from; i < from + n; i++) {
            key = (key ^ (tokens[i] & 0xffffffffL)) * FNV_PRIME;
        }
        return key;
    }

    private int find(long key) {
        int low = 0;
        int high = keys.length - 1;
        while (low <= high) {
            int mid = (low + high) >>> 1;
            int order = Long.compareUnsigned(keys[mid], key);
            if (order == 0) {
                return mid;
            }
            if (order < 0) {
                low = mid + 1;
            } else {
                high = mid - 1;
            }
        }
        return -1;
    }

    /** The tokens drafted and the first one's matched n (as static_ngrams.StaticNgrams.chain). */
    static final class Chain {
        final int n;
        final int[] tokens;

        Chain(int n, int[] tokens) {
            this.n = n;
            this.tokens = tokens;
        }
    }

    /** Up to {@code length} tokens, each the table's successor of the longest held n-gram ending the context and the
     * tokens drafted before it. */
    Chain chain(int[] context, int length) {
        int longest = orders[0];
        int keep = Math.min(longest, context.length);
        int[] extended = Arrays.copyOfRange(context, context.length - keep, context.length + length);
        int size = keep;
        int first = 0;
        int drafted = 0;
        while (drafted < length) {
            int next = -1;
            for (int n : orders) {
                if (size >= n) {
                    int at = find(key(extended, size - n, n));
                    if (at >= 0) {
                        next = nextIds[at];
                        first = first == 0 ? n : first;
                        break;
                    }
                }
            }
            if (next < 0) {
                break;
            }
            extended[size++] = next;
            drafted++;
        }
        return new Chain(first, Arrays.copyOfRange(extended, keep, keep + drafted));
    }
}

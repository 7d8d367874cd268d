package org.mtpedge.engine;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.HashMap;
import java.util.Map;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.zip.ZipEntry;
import java.util.zip.ZipInputStream;

/**
 * Small numpy files read whole: a .npy array (float32 or float64, little-endian, C order, any shape, read as
 * float) and a .npz archive of them (a zip of NAME.npy entries, as {@code np.savez} writes), plus integer arrays and
 * string scalars (the static n-gram table). The bundle's adapter
 * files are of this kind (learned masks, the sampler head); the large embedding table is memory-mapped instead
 * ({@link EmbeddingTable}).
 */
public final class Npy {
    private static final Pattern DESCR = Pattern.compile("'descr':\\s*'([^']*)'");
    private static final Pattern SHAPE = Pattern.compile("'shape':\\s*\\(([^)]*)\\)");

    /** An array's shape and its values in C order. */
    public static final class Array {
        public final int[] shape;
        public final float[] data;

        Array(int[] shape, float[] data) {
            this.shape = shape;
            this.data = data;
        }

        /** The rows of a 2-D array. */
        public float[][] rows(String what) {
            if (shape.length != 2) {
                throw new BundleException(what + " must be a 2-D array, it has shape " + java.util.Arrays.toString(shape));
            }
            float[][] out = new float[shape[0]][];
            for (int r = 0; r < shape[0]; r++) {
                out[r] = java.util.Arrays.copyOfRange(data, r * shape[1], (r + 1) * shape[1]);
            }
            return out;
        }
    }

    private Npy() {
    }

    public static Array read(Path file) {
        try {
            return parse(Files.readAllBytes(file), file.toString());
        } catch (IOException err) {
            throw new BundleException("cannot read " + file + ": " + err.getMessage() + ": push the whole bundle "
                    + "folder again", err);
        }
    }

    /** Every array of a .npz archive, by name (without ".npy"). */
    public static Map<String, Array> readArchive(Path file) {
        Map<String, Array> arrays = new HashMap<>();
        for (Map.Entry<String, byte[]> entry : readEntries(file).entrySet()) {
            arrays.put(entry.getKey(), parse(entry.getValue(), file + ":" + entry.getKey() + ".npy"));
        }
        return arrays;
    }

    /** The raw .npy entries of a .npz archive (stored or deflated), by name (without ".npy"). */
    public static Map<String, byte[]> readEntries(Path file) {
        Map<String, byte[]> entries = new HashMap<>();
        try (ZipInputStream zip = new ZipInputStream(Files.newInputStream(file))) {
            for (ZipEntry entry = zip.getNextEntry(); entry != null; entry = zip.getNextEntry()) {
                String name = entry.getName();
                if (name.endsWith(".npy")) {
                    entries.put(name.substring(0, name.length() - 4), readAll(zip));
                }
            }
        } catch (IOException err) {
            throw new BundleException("cannot read " + file + " (" + err.getMessage() + "): push the whole bundle "
                    + "folder again", err);
        }
        if (entries.isEmpty()) {
            throw new BundleException(file + " holds no arrays: it is not a .npz file written by `mtpedge export`");
        }
        return entries;
    }

    private static byte[] readAll(InputStream in) throws IOException {
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        byte[] buffer = new byte[1 << 16];
        for (int got = in.read(buffer); got > 0; got = in.read(buffer)) {
            out.write(buffer, 0, got);
        }
        return out.toByteArray();
    }

    /** A .npy header: the value type, the shape and where the values start. */
    private static final class Header {
        final String type;
        final int[] shape;
        final int count;
        final int offset;
        final ByteBuffer buffer;

        Header(byte[] bytes, String what) {
            buffer = ByteBuffer.wrap(bytes).order(ByteOrder.LITTLE_ENDIAN);
            if (bytes.length < 10 || bytes[0] != (byte) 0x93
                    || !new String(bytes, 1, 5, StandardCharsets.ISO_8859_1).equals("NUMPY")) {
                throw new BundleException(what + " is not a .npy array: re-run `mtpedge export`");
            }
            int major = bytes[6];
            int headerLength = major == 1 ? buffer.getShort(8) & 0xffff : buffer.getInt(8);
            int start = major == 1 ? 10 : 12;
            String header = new String(bytes, start, headerLength, StandardCharsets.ISO_8859_1);
            Matcher descr = DESCR.matcher(header);
            Matcher shapeText = SHAPE.matcher(header);
            if (!descr.find() || !shapeText.find() || header.contains("'fortran_order': True")) {
                throw new BundleException(what + " has a header this app cannot read (" + header.trim() + ")");
            }
            type = descr.group(1);
            String[] dims = shapeText.group(1).split(",");
            int product = 1;
            int rank = 0;
            int[] dimensions = new int[dims.length];
            for (String d : dims) {
                if (!d.trim().isEmpty()) {
                    dimensions[rank] = Integer.parseInt(d.trim());
                    product *= dimensions[rank++];
                }
            }
            shape = java.util.Arrays.copyOf(dimensions, rank);
            count = product;
            offset = start + headerLength;
        }

        void checkSize(int itemSize, String what) {
            if (buffer.capacity() < offset + (long) count * itemSize) {
                throw new BundleException(what + " is truncated: push the bundle again");
            }
        }
    }

    static Array parse(byte[] bytes, String what) {
        Header h = new Header(bytes, what);
        if (!h.type.equals("<f4") && !h.type.equals("<f8")) {
            throw new BundleException(what + " holds " + h.type + " values; the app reads float32 or float64 arrays");
        }
        int size = h.type.equals("<f4") ? 4 : 8;
        h.checkSize(size, what);
        float[] data = new float[h.count];
        for (int i = 0; i < h.count; i++) {
            data[i] = size == 4 ? h.buffer.getFloat(h.offset + 4 * i) : (float) h.buffer.getDouble(h.offset + 8 * i);
        }
        return new Array(h.shape, data);
    }

    /** The values of an integer array (int32, int64 or uint64, little-endian), flat, as longs (uint64 bit for bit). */
    public static long[] parseLongs(byte[] bytes, String what) {
        Header h = new Header(bytes, what);
        boolean four = h.type.equals("<i4");
        if (!four && !h.type.equals("<i8") && !h.type.equals("<u8")) {
            throw new BundleException(what + " holds " + h.type + " values where integers were expected");
        }
        h.checkSize(four ? 4 : 8, what);
        long[] data = new long[h.count];
        for (int i = 0; i < h.count; i++) {
            data[i] = four ? h.buffer.getInt(h.offset + 4 * i) : h.buffer.getLong(h.offset + 8 * i);
        }
        return data;
    }

    /** A numpy string scalar ('<U' type, UTF-32), as {@code np.array("text")} writes it. */
    public static String parseText(byte[] bytes, String what) {
        Header h = new Header(bytes, what);
        if (!h.type.startsWith("<U") || h.count != 1) {
            throw new BundleException(what + " holds " + h.type + " values where one string was expected");
        }
        int chars = Integer.parseInt(h.type.substring(2));
        h.checkSize(4 * chars, what);
        StringBuilder text = new StringBuilder();
        for (int i = 0; i < chars; i++) {
            int codePoint = h.buffer.getInt(h.offset + 4 * i);
            if (codePoint == 0) {
                break;
            }
            text.appendCodePoint(codePoint);
        }
        return text.toString();
    }
}

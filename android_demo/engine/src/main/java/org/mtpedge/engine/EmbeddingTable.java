package org.mtpedge.engine;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.FloatBuffer;
import java.nio.MappedByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * The bundle's input embedding table (vocab, hidden) float32, memory-mapped from its .npy file; rows are looked
 * up on the host, so a mask slot is just a vector the drafter supplies.
 */
public final class EmbeddingTable implements Embeddings {
    private static final Pattern SHAPE = Pattern.compile("'shape':\\s*\\((\\d+),\\s*(\\d+)\\s*,?\\)");
    public final int rows;
    public final int dim;
    private final FloatBuffer data;
    private double[] columnMean;

    public EmbeddingTable(int rows, int dim, FloatBuffer data) {
        if (data.capacity() != (long) rows * dim) {
            throw new IllegalArgumentException("table of " + data.capacity() + " floats is not " + rows + " x " + dim);
        }
        this.rows = rows;
        this.dim = dim;
        this.data = data;
    }

    /** Map a little-endian float32, C-order, 2-D .npy file (what `mtpedge export` writes). */
    public static EmbeddingTable open(Path file) {
        try (FileChannel channel = FileChannel.open(file, StandardOpenOption.READ)) {
            ByteBuffer head = ByteBuffer.allocate(12).order(ByteOrder.LITTLE_ENDIAN);
            channel.read(head, 0);
            head.flip();
            byte[] magic = new byte[6];
            head.get(magic);
            if (magic[0] != (byte) 0x93 || !new String(magic, 1, 5, StandardCharsets.ISO_8859_1).equals("NUMPY")) {
                throw new BundleException(file + " is not a .npy file: re-run `mtpedge export`");
            }
            int major = head.get();
            head.get();
            long headerLength = major == 1 ? (head.getShort() & 0xffff) : head.getInt();
            long headerStart = major == 1 ? 10 : 12;
            ByteBuffer header = ByteBuffer.allocate((int) headerLength);
            channel.read(header, headerStart);
            String dict = new String(header.array(), StandardCharsets.ISO_8859_1);
            if (!dict.contains("'descr': '<f4'") || dict.contains("'fortran_order': True")) {
                throw new BundleException(file + " must be little-endian float32 in C order, its header says " + dict.trim()
                        + ": re-run `mtpedge export`");
            }
            Matcher m = SHAPE.matcher(dict);
            if (!m.find()) {
                throw new BundleException(file + " is not a 2-D table (header " + dict.trim() + ")");
            }
            int rows = Integer.parseInt(m.group(1));
            int dim = Integer.parseInt(m.group(2));
            long offset = headerStart + headerLength;
            long bytes = (long) rows * dim * 4;
            if (channel.size() < offset + bytes) {
                throw new BundleException(file + " is truncated (" + channel.size() + " bytes, expected "
                        + (offset + bytes) + "): push the bundle again");
            }
            MappedByteBuffer mapped = channel.map(FileChannel.MapMode.READ_ONLY, offset, bytes);
            return new EmbeddingTable(rows, dim, mapped.order(ByteOrder.LITTLE_ENDIAN).asFloatBuffer());
        } catch (IOException err) {
            throw new BundleException("cannot read " + file + ": " + err.getMessage(), err);
        }
    }

    @Override
    public int rows() {
        return rows;
    }

    @Override
    public int dim() {
        return dim;
    }

    /** Computed once per table (a full pass over it) and kept: drafters are made per reply. */
    @Override
    public synchronized double[] columnMean() {
        if (columnMean == null) {
            columnMean = Embeddings.super.columnMean();
        }
        return columnMean.clone();
    }

    @Override
    public void copyRow(int token, float[] out, int offset) {
        if (token < 0 || token >= rows) {
            throw new IllegalArgumentException("token id " + token + " is outside the vocabulary (" + rows + ")");
        }
        FloatBuffer view = data.duplicate();
        view.position(token * dim);
        view.get(out, offset, dim);
    }
}

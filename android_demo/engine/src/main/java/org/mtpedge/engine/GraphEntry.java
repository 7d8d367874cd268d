package org.mtpedge.engine;

/** One static graph of a bundle: its file, kind (prefill | decode), width N and context C. */
public final class GraphEntry {
    public final String name;
    public final String file;
    public final String kind;
    public final int width;
    public final int context;
    public final String precision;

    public GraphEntry(String name, String file, String kind, int width, int context, String precision) {
        this.name = name;
        this.file = file;
        this.kind = kind;
        this.width = width;
        this.context = context;
        this.precision = precision;
    }

    @Override
    public String toString() {
        return name;
    }
}

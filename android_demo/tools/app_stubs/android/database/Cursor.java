package android.database;
public interface Cursor extends java.io.Closeable {
    boolean moveToNext();
    String getString(int columnIndex);
    long getLong(int columnIndex);
    void close();
}

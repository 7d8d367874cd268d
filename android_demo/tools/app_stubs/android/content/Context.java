package android.content;
public abstract class Context {
    public abstract java.io.File getExternalFilesDir(String type);
    public abstract java.io.File getFilesDir();
    public abstract ContentResolver getContentResolver();
    public final String getString(int resId, Object... formatArgs) { return null; }
}

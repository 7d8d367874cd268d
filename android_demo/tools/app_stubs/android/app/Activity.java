package android.app;
public class Activity extends android.content.Context {
    public static final int RESULT_OK = -1;
    protected void onCreate(android.os.Bundle savedInstanceState) { }
    protected void onDestroy() { }
    protected void onActivityResult(int requestCode, int resultCode, android.content.Intent data) { }
    public void setContentView(int layoutResID) { }
    public <T extends android.view.View> T findViewById(int id) { return null; }
    public void startActivityForResult(android.content.Intent intent, int requestCode) { }
    @Override public java.io.File getExternalFilesDir(String type) { return null; }
    @Override public java.io.File getFilesDir() { return null; }
    @Override public android.content.ContentResolver getContentResolver() { return null; }
}

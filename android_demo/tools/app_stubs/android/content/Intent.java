package android.content;
public class Intent {
    public static final String ACTION_OPEN_DOCUMENT_TREE = "android.intent.action.OPEN_DOCUMENT_TREE";
    public Intent(String action) { }
    public android.net.Uri getData() { return null; }
}

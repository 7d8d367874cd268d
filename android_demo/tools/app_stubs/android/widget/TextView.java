package android.widget;
public class TextView extends android.view.View {
    public final void setText(CharSequence text) { }
    public final void setText(int resid) { }
    public final void append(CharSequence text) { }
    public int length() { return 0; }
    public CharSequence getText() { return null; }
}

package android.view;
public class View {
    public static final int FOCUS_DOWN = 130;
    public interface OnClickListener { void onClick(View v); }
    public void setOnClickListener(OnClickListener l) { }
    public void setEnabled(boolean enabled) { }
    public boolean post(Runnable action) { return true; }
}

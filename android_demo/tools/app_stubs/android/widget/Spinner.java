package android.widget;
public class Spinner extends android.view.View {
    public void setAdapter(SpinnerAdapter adapter) { }
    public void setSelection(int position) { }
    public int getSelectedItemPosition() { return 0; }
}

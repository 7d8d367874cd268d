package android.widget;
public class ScrollView extends android.view.View { public boolean fullScroll(int direction) { return true; } }

package android.widget;
public class CheckBox extends Button { public boolean isChecked() { return false; } }

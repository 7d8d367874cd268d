package org.mtpedge.demo;
/** Stand-in for the R class the Android build generates from app/src/main/res. */
public final class R {
    public static final class layout { public static final int activity_main = 1; }
    public static final class id {
        public static final int bundle = 1, import_bundle = 2, drafter = 3, use_qnn = 4, load = 5, status = 6,
                scroll = 7, transcript = 8, stats = 9, prompt = 10, send = 11;
    }
    public static final class string {
        public static final int app_name = 1, load = 2, import_bundle = 3, use_qnn = 4, send = 5, stop = 6,
                prompt_hint = 7, no_bundles = 8;
    }
}

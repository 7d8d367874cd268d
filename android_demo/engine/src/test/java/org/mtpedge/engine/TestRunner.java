package org.mtpedge.engine;

import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.lang.reflect.Modifier;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Comparator;
import java.util.List;

/**
 * A tiny test runner (no JUnit jar can be fetched here): runs every public no-argument method whose name starts
 * with "test" in the listed classes, prints each failure, and ends with the line "N passed, M failed, K skipped".
 * Exit status 1 when anything failed. Optional arguments: substrings of test names to run only those.
 */
public final class TestRunner {
    private static final Class<?>[] SUITES = {
        JsonTest.class, LayoutGoldenTest.class, RopeGoldenTest.class, VerifyGoldenTest.class,
        SamplingGoldenTest.class, TokenizerGoldenTest.class, ChatGoldenTest.class, ManifestTest.class,
        DecodeReplayTest.class, DrafterGoldenTest.class, TemplatesTest.class, SizingGoldenTest.class,
        DefaultDrafterGoldenTest.class,
    };

    /** Thrown by a test that cannot run here (e.g. it needs a real bundle); counted, never a pass. */
    public static final class Skip extends RuntimeException {
        public Skip(String reason) {
            super(reason);
        }
    }

    private TestRunner() {
    }

    public static void main(String[] args) throws Exception {
        int passed = 0;
        int failed = 0;
        int skipped = 0;
        List<String> failures = new ArrayList<>();
        for (Class<?> suite : SUITES) {
            Method[] methods = suite.getDeclaredMethods();
            Arrays.sort(methods, Comparator.comparing(Method::getName));
            for (Method method : methods) {
                String name = suite.getSimpleName() + "." + method.getName();
                if (!method.getName().startsWith("test") || method.getParameterCount() != 0
                        || !Modifier.isPublic(method.getModifiers()) || !selected(name, args)) {
                    continue;
                }
                long started = System.nanoTime();
                try {
                    Object instance = Modifier.isStatic(method.getModifiers()) ? null
                            : suite.getDeclaredConstructor().newInstance();
                    method.invoke(instance);
                    passed++;
                    System.out.printf("PASS %s (%.0f ms)%n", name, (System.nanoTime() - started) / 1e6);
                } catch (InvocationTargetException wrapped) {
                    Throwable err = wrapped.getCause();
                    if (err instanceof Skip) {
                        skipped++;
                        System.out.println("SKIP " + name + ": " + err.getMessage());
                    } else {
                        failed++;
                        failures.add(name);
                        System.out.println("FAIL " + name + ": " + err);
                        StackTraceElement[] trace = err.getStackTrace();
                        for (int i = 0; i < Math.min(4, trace.length); i++) {
                            System.out.println("    at " + trace[i]);
                        }
                    }
                }
            }
        }
        if (!failures.isEmpty()) {
            System.out.println("failed: " + String.join(", ", failures));
        }
        System.out.println(passed + " passed, " + failed + " failed, " + skipped + " skipped");
        System.exit(failed > 0 || passed == 0 ? 1 : 0);
    }

    private static boolean selected(String name, String[] filters) {
        if (filters.length == 0) {
            return true;
        }
        for (String f : filters) {
            if (name.contains(f)) {
                return true;
            }
        }
        return false;
    }
}

// The engine: plain Java, no Android imports and no dependencies, so it builds and tests on any JVM.
plugins {
    `java-library`
}

// Main sources against the Java 8 library, as run_tests.sh does: Android 10 (API 29, the app's minSdk) has Java
// 8's library plus java.nio.file, and code compiled against JDK 9+ would call covariant methods such as
// FloatBuffer.position(int) -> FloatBuffer that older Android lacks (NoSuchMethodError at run time).
tasks.named<JavaCompile>("compileJava") {
    options.release.set(8)
}

tasks.named<JavaCompile>("compileTestJava") {
    options.release.set(17)
}

// The golden-vector tests use their own tiny runner (the same one run_tests.sh runs with plain javac), so the
// project needs no JUnit jar; `gradle :engine:check` runs them.
val goldenTest by tasks.registering(JavaExec::class) {
    description = "Replays the Python runtime's golden vectors on the JVM"
    group = "verification"
    classpath = sourceSets["test"].runtimeClasspath
    mainClass.set("org.mtpedge.engine.TestRunner")
}

tasks.named("check") {
    dependsOn(goldenTest)
}

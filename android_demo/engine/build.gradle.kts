// The engine: plain Java 17, no Android imports and no dependencies, so it builds and tests on any JVM.
plugins {
    `java-library`
}

java {
    sourceCompatibility = JavaVersion.VERSION_17
    targetCompatibility = JavaVersion.VERSION_17
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

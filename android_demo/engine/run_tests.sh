#!/usr/bin/env bash
# Compile the engine and its golden-vector tests with plain javac (JDK 17; no Gradle, Maven or Android SDK
# needed) and run them. The last line is "N passed, M failed, K skipped"; the exit status is non-zero on failure.
# Arguments are passed to the runner: substrings of test names to run only those.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
javac -encoding UTF-8 --release 17 -Xlint:all,-serial,-cast -Werror -d "$out/main" \
    $(find "$here/src/main/java" -name '*.java')
javac -encoding UTF-8 --release 17 -Xlint:all,-serial,-cast -Werror -cp "$out/main" -d "$out/test" \
    $(find "$here/src/test/java" -name '*.java')
java -Xss4m -cp "$out/main:$out/test:$here/src/test/resources" org.mtpedge.engine.TestRunner "$@"

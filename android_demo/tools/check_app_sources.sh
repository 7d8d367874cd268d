#!/usr/bin/env bash
# Compile the app's Java sources with plain javac against the engine and hand-written stand-ins of the Android and
# ONNX Runtime classes they use (tools/app_stubs: there is no Android SDK here). Catches errors in the app's use of
# the engine API and plain Java errors; it does not prove the Android/ORT signatures (a Gradle build does).
# Also checks that every R.id / R.string the stand-in R declares exists in the app's resources.
set -euo pipefail
demo="$(cd "$(dirname "$0")/.." && pwd)"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
for name in $(grep -o 'int [a-z_]* = [0-9]*' "$demo/tools/app_stubs/org/mtpedge/demo/R.java" | awk '{print $2}'); do
    grep -rq -e "@+id/$name\"" -e "name=\"$name\"" -e "layout/$name" "$demo/app/src/main/res" \
        || [ -f "$demo/app/src/main/res/layout/$name.xml" ] \
        || { echo "R.$name is used by the app but missing from app/src/main/res"; exit 1; }
done
# Java 8's library, as for the engine (run_tests.sh): what Android 10 (API 29) has, java.nio.file aside
javac -encoding UTF-8 --release 8 -Xlint:all,-options,-serial,-cast -Werror -d "$out" \
    $(find "$demo/engine/src/main/java" "$demo/app/src/main/java" "$demo/tools/app_stubs" -name '*.java')
echo "app sources compile against the engine and the API stand-ins"

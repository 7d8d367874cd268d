#!/usr/bin/env bash
# Compile the engine and its golden-vector tests with plain javac (JDK 17; no Gradle, Maven or Android SDK
# needed) and run them. The last line is "N passed, M failed, K skipped"; the exit status is non-zero on failure.
#
#   run_tests.sh                 replay the committed golden vectors (src/test/resources/golden)
#   run_tests.sh --fresh         first regenerate them from the installed Python runtime (android_demo/tools/
#                                make_golden.py, into a temporary folder), so that a change of behaviour in the
#                                Python tree, verifier, drafters, ... fails here until the Java port follows;
#                                the decodes are re-recorded too: a tiny random model's (exported on the fly,
#                                needs torch) and SmolLM2's where its bundle exists (MTPEDGE_BUNDLE, else
#                                mtpedge's default cache folder, which honours MTPEDGE_CACHE); a decode that
#                                cannot be re-recorded is replayed from the committed file
#   run_tests.sh [--fresh] NAME  only tests whose name contains NAME
#
# PYTHON (default python3) must import mtpedge for --fresh.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
resources="$here/src/test/resources"
if [ "${1:-}" = "--fresh" ]; then
    shift
    mkdir -p "$out/resources"
    cp -r "$resources/golden" "$out/resources/golden"
    python="${PYTHON:-python3}"
    bundle="${MTPEDGE_BUNDLE:-$("$python" -c 'from mtpedge.bundles import default_bundle_dir; print(default_bundle_dir(None, 1024))')}"
    decode=(--decode --bundle "$bundle")
    echo "regenerating the golden vectors from $("$python" -c 'import mtpedge, os; print(os.path.dirname(mtpedge.__file__))') ${decode[*]}"
    # (the status is make_golden.py's: PIPESTATUS read after `|| true` is that of `true`, which let a failed
    # regeneration replay the committed files unnoticed)
    status=0
    "$python" "$here/../tools/make_golden.py" --out "$out/resources/golden" "${decode[@]}" > "$out/make_golden.log" \
        2>&1 || status=$?
    grep -v '^loaded ' "$out/make_golden.log" || true
    [ "$status" -eq 0 ] || { echo "make_golden.py failed (exit $status)"; exit 1; }
    resources="$out/resources"
fi
# The engine is compiled against the Java 8 library: the app runs it on Android 10 (API 29), whose library is
# Java 8's plus java.nio.file, so a Java 9+ call (List.of, Path.of, ...) would compile here and crash there.
javac -encoding UTF-8 --release 8 -Xlint:all,-options,-serial,-cast -Werror -d "$out/main" \
    $(find "$here/src/main/java" -name '*.java')
javac -encoding UTF-8 --release 17 -Xlint:all,-serial,-cast -Werror -cp "$out/main" -d "$out/test" \
    $(find "$here/src/test/java" -name '*.java')
java -Xss4m -cp "$out/main:$out/test:$resources" org.mtpedge.engine.TestRunner "$@"

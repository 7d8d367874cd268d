#!/usr/bin/env bash
# Set up and run every test: lint, the Python suite (tiny models and the real SmolLM2, marked slow).
# The SmolLM2 bundle is exported inside the checkout (.cache/) so a clean clone tests a fresh export.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. .venv/bin/activate
export MTPEDGE_CACHE=${MTPEDGE_CACHE:-$PWD/.cache/mtpedge}
ruff check .
python -m pytest -q --durations=15 "$@"

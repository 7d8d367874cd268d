#!/usr/bin/env bash
# Set up and run every test: lint, the Python suite (tiny models and the real SmolLM2, marked slow), and the
# Android engine's golden-vector tests on the JVM (golden files regenerated from this Python runtime first,
# so a behaviour change on either side fails). The SmolLM2 bundle is exported inside the checkout (.cache/),
# so a clean clone tests a fresh export.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. .venv/bin/activate
export MTPEDGE_CACHE=${MTPEDGE_CACHE:-$PWD/.cache/mtpedge}
ruff check .
python -m pytest -q --durations=15 "$@"
PYTHON=python bash android_demo/engine/run_tests.sh --fresh
bash android_demo/tools/check_app_sources.sh

#!/usr/bin/env bash
# Issue 16's recipe on a lent GPU machine (the `device` tool): PyTorch with CUDA is there, nothing can be
# downloaded there, and a call carries at most 64 MiB with the checkout (~26 MB). The embedded GGUF file (98 MB)
# therefore travels in three parts, over three calls made while the machine stays warm (30 s after each call).
#
# Here, once:          bash scripts/lent_gpu.sh prepare      -> .gpu/ (ignored): model parts, its sha256, the
#                                                                gguf wheel; prints the three calls to make
# There, calls 1, 2:   bash scripts/lent_gpu.sh receive      (carry .gpu/part-aa, then .gpu/part-ab)
# There, call 3:       bash scripts/lent_gpu.sh receive && bash scripts/lent_gpu.sh train   (carry the rest)
#
# `train` rebuilds and checks the model, installs mtpedge and the wheel without network, and runs
# scripts/train_recipe.sh with results in $OUT (the files that come back: logs and two release copies).
# Budget (device time is 15 minutes in all, a machine's start included): DISTILL_S=150 and TRAIN_S=300 by
# default, ~9 minutes of the 10 a call may take.
set -euo pipefail
cd "$(dirname "$0")/.."
STORE=${STORE:-/tmp/mtpedge-gpu}  # outside the checkout: it outlives the call while the machine stays warm
PYTHON=${PYTHON:-python3}  # there: the one with PyTorch (a rehearsal here: PYTHON=.venv/bin/python DEVICE=cpu)
PART_BYTES=$((33 * 1000 * 1000))

prepare() {
    . .venv/bin/activate
    local model
    model=$(python -c "from mtpedge.models.loading import default_model_path; print(default_model_path())")
    rm -rf .gpu && mkdir -p .gpu
    grep -qx '/.gpu/' .git/info/exclude 2>/dev/null || echo '/.gpu/' >>.git/info/exclude
    split -b "$PART_BYTES" -a 2 "$model" .gpu/part-
    (cd "$(dirname "$model")" && sha256sum "$(basename "$model")") >.gpu/model.sha256
    python -m pip download -q --no-deps --only-binary=:all: -d .gpu "gguf==$(python -c 'import importlib.metadata as m; print(m.version("gguf"))')"
    ls -la .gpu
    local parts=(.gpu/part-*)
    echo "calls to make with the device tool's run, each within 30 s of the last one's reply:"
    for ((i = 0; i < ${#parts[@]} - 1; i++)); do
        echo "  run(command='bash scripts/lent_gpu.sh receive', carry=['${parts[i]}'], timeout_s=120)"
    done
    echo "  run(command='bash scripts/lent_gpu.sh receive && bash scripts/lent_gpu.sh train', timeout_s=590,"
    echo "      carry=['${parts[-1]}', '.gpu/model.sha256', '$(ls .gpu/*.whl)'])"
}

receive() {
    mkdir -p "$STORE"
    cp -v .gpu/* "$STORE"/
    ls -la "$STORE"
}

train() {
    local name
    name=$(awk '{print $2}' "$STORE/model.sha256")
    cat "$STORE"/part-* >"$STORE/$name"
    (cd "$STORE" && sha256sum -c model.sha256) || { echo "model parts missing or damaged: receive them again"; exit 1; }
    "$PYTHON" -m pip install -q --no-index --no-deps "$STORE"/gguf-*.whl
    importable "$STORE/src"
    export PYTHONPATH="$STORE/src${PYTHONPATH:+:$PYTHONPATH}"
    "$PYTHON" -c "import mtpedge.models.loading, torch; print('mtpedge importable; torch', torch.__version__)"
    nvidia-smi --query-gpu=name,memory.total --format=csv || true
    OUT=${OUT:?the device tool sets OUT}
    WORK="$STORE/work" BATCH=${BATCH:-256} DISTILL_S=${DISTILL_S:-150} TRAIN_S=${TRAIN_S:-300} \
        EVAL_EVERY=${EVAL_EVERY:-2000} DEVICE=${DEVICE:-cuda} MTPEDGE="$PYTHON -m mtpedge.main" \
        bash scripts/train_recipe.sh "$OUT" "$STORE/$name"
}

importable() {
    # mtpedge's packages as pyproject's package-dir lays them out, as links into this checkout: nothing is built,
    # so no build backend or network is needed there
    "$PYTHON" - "$1" <<'PY'
import sys, tomllib
from pathlib import Path
root, dest = Path.cwd(), Path(sys.argv[1])
layout = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
for package, folder in sorted(layout.items(), key=lambda item: item[0].count(".")):
    target = dest.joinpath(*package.split("."))
    if target.exists() or target.is_symlink():
        continue
    if "." not in package:  # the root package: a real folder, so that its subpackages can sit in it
        target.mkdir(parents=True)
        for entry in (root / folder).iterdir():
            (target / entry.name).symlink_to(entry)
    else:
        target.symlink_to(root / folder)
PY
}

case "${1:-}" in
    prepare) prepare ;;
    receive) receive ;;
    train) train ;;
    *) echo "usage: bash scripts/lent_gpu.sh prepare|receive|train (see the comment at the top)"; exit 2 ;;
esac

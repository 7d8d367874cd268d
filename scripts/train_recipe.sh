#!/usr/bin/env bash
# Issue 16's recipe in one command: the model's own answers (`mtpedge distill`), then the MTP adapter and the
# DMTD model trained side by side from them, each for a fixed time, with held-out figures as they go.
# The same command runs on this CPU (hours) and on a lent GPU (minutes: --device auto takes CUDA there;
# scripts/lent_gpu.sh brings the model over). Everything is resumable: run it again to go on.
#
#   bash scripts/train_recipe.sh OUT [MODEL]        MODEL: GGUF file or HF folder (default: embedded SmolLM2)
#
# Writes to OUT: distill.log, mtp.log, dmtd.log (progress and held-out lines) and the float16 release copies
# mtp-release.pt and dmtd-release.pt, which replace export/data/smollm2-135m-instruct-{mtp,dmtd}.pt when their
# held-out figures beat the shipped ones. Working files (data, checkpoints) go to WORK (default OUT/work).
# Settings (environment):
#   DISTILL_S  seconds of data generation (default 3600; the full plan is ~7,500 conversations, ~1.2M tokens)
#   TRAIN_S    seconds of training for each model; the two run at once (default 3600)
#   BATCH      answers generated together (default 64; 256 or more on a GPU)
#   SCALE      share of the distillation plan (default 1; 0.002 makes a smoke run)
#   EVAL_EVERY steps between held-out evaluations, both trainers (default 500)
#   MTP_ARGS / DMTD_ARGS  the trainers' model settings (defaults below: the shipped configurations)
#   DEVICE     auto | cpu | cuda (default auto);  THREADS  torch threads per job on a CPU (default 1)
#   PRECISION  the trainers' forward passes: float32 (default) or bfloat16 (faster with AMX or a GPU)
set -euo pipefail
OUT=${1:?usage: bash scripts/train_recipe.sh OUT_DIR [MODEL]}
MODEL=${2:-}
cd "$(dirname "$0")/.."
WORK=${WORK:-$OUT/work}
DISTILL_S=${DISTILL_S:-3600}
TRAIN_S=${TRAIN_S:-3600}
BATCH=${BATCH:-64}
SCALE=${SCALE:-1}
EVAL_EVERY=${EVAL_EVERY:-500}
DEVICE=${DEVICE:-auto}
THREADS=${THREADS:-1}
PRECISION=${PRECISION:-float32}
MTP_ARGS=${MTP_ARGS:-"--k 3 --rank 8 --alpha 16 --max-blocks 64 --lr 1.5e-3 --warmup 30"}
DMTD_ARGS=${DMTD_ARGS:-"--decoding-layers 6 --thinking-layers 2 --rank 32 --lr 1e-3"}
QUESTIONS=bench/data/spec_bench/question.jsonl
MTPEDGE=${MTPEDGE:-mtpedge}
mkdir -p "$OUT" "$WORK"
export PYTHONUNBUFFERED=1
model_flag=(); [ -n "$MODEL" ] && model_flag=(--model "$MODEL")
common=(--device "$DEVICE" --threads "$THREADS")

echo "[recipe] data: up to $DISTILL_S s into $WORK/data (batch $BATCH, scale $SCALE)"
$MTPEDGE distill --out "$WORK/data" "${model_flag[@]}" "${common[@]}" --batch "$BATCH" --scale "$SCALE" \
    --time-limit "$DISTILL_S" 2>&1 | tee -a "$OUT/distill.log"

echo "[recipe] training: MTP and DMTD side by side, $TRAIN_S s each"
resume_mtp=(); [ -f "$WORK/mtp.pt" ] && resume_mtp=(--resume)
resume_dmtd=(); [ -f "$WORK/dmtd/dmtd.pt" ] && resume_dmtd=(--resume)
# --steps is only an upper bound: each run stops at its time limit, its cosine laid over that time
# shellcheck disable=SC2086
$MTPEDGE train-mtp --data "$WORK/data" --out "$WORK/mtp.pt" "${model_flag[@]}" "${common[@]}" $MTP_ARGS \
    --precision "$PRECISION" \
    --steps 10000000 --time-limit "$TRAIN_S" --checkpoint-every 200 "${resume_mtp[@]}" \
    --heldout-questions "$QUESTIONS" --eval-every "$EVAL_EVERY" --eval-candidates 64 \
    --release-copy "$OUT/mtp-release.pt" >>"$OUT/mtp.log" 2>&1 &
mtp=$!
# shellcheck disable=SC2086
$MTPEDGE train-dmtd $MODEL --data "$WORK/data" --out "$WORK/dmtd" "${common[@]}" $DMTD_ARGS \
    --precision "$PRECISION" \
    --steps 10000000 --time-limit "$TRAIN_S" --checkpoint-every 200 "${resume_dmtd[@]}" \
    --heldout-questions "$QUESTIONS" --eval-every "$EVAL_EVERY" \
    --release-copy "$OUT/dmtd-release.pt" >>"$OUT/dmtd.log" 2>&1 &
dmtd=$!
status=0
wait "$mtp" || { status=$?; echo "[recipe] train-mtp failed ($status): see $OUT/mtp.log"; }
wait "$dmtd" || { status=$?; echo "[recipe] train-dmtd failed ($status): see $OUT/dmtd.log"; }
grep -h "held-out" "$OUT/mtp.log" "$OUT/dmtd.log" | tail -n 6 || true
ls -la "$OUT"
exit "$status"

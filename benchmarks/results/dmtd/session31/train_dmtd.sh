#!/usr/bin/env bash
# s31: continue the shipped DMTD model (D=6, m=2, rank 32) on answers to prompts it never saw (distill seeds 32+33,
# drawn with the seeded-prompt fix: 2,724 answers, 481k response tokens, 62% of prompts never asked before), the
# 27th session's run A recipe (tau 2,3,4; lr 5e-4; 55 min of one thread), to test "data is the lever" honestly
set -uo pipefail
cd /work/main
. .venv/bin/activate
R=/work/runs/s31
nice -n 10 mtpedge train-dmtd --init default --data /work/runs/s30/data-merged --decoding-layers 6 --thinking-layers 2 \
  --rank 32 --lr 5e-4 --steps 8000 --time-limit ${LIMIT:-3300} --eval-every 1000 --checkpoint-every 100 \
  --heldout-questions bench/data/spec_bench/question.jsonl --threads 1 --resume --out $R/dmtd-new \
  --release-copy $R/dmtd-new-release.pt > $R/dmtd-new.log 2>&1
echo "done $(date)" >> $R/dmtd-new.log

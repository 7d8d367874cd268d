#!/usr/bin/env bash
# s26: continue the shipped DMTD model (D 6, m 2, rank 32) on s24 + s25 self-distilled data (2x the tokens), one thread
set -uo pipefail
cd /work/main
. .venv/bin/activate
R=/work/runs/s26
mkdir -p $R/dmtd-cont && cp -n /work/runs/s22/abl/heldout-128.npz $R/dmtd-cont/heldout.npz
nice -n 10 mtpedge train-dmtd --init default --data $R/data-both --out $R/dmtd-cont --decoding-layers 6 --thinking-layers 2 --rank 32 --lr 5e-4 \
  --steps 8000 --time-limit 4500 --eval-every 1000 --checkpoint-every 100 \
  --heldout-questions bench/data/spec_bench/question.jsonl --threads 1 --resume --release-copy $R/dmtd-cont-release.pt \
  > $R/dmtd-cont.log 2>&1
echo "cont done rc=$? $(date)"

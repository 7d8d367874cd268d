#!/usr/bin/env bash
# s27: continue the shipped DMTD model on s24 + s25 + s27 answers, two runs side by side (one thread each):
# A: the cycle lengths it was trained on (2,3,4); B: tau 2 only (dmtd-spec's default draft_len 1 uses draft 1 alone)
set -uo pipefail
cd /work/main
. .venv/bin/activate
R=/work/runs/s27
for f in $R/distill27/*.npz; do ln -sf $f $R/data-all/s27-$(basename $f); done
for run in A B; do
  mkdir -p $R/dmtd-$run && cp -n /work/runs/s22/abl/heldout-128.npz $R/dmtd-$run/heldout.npz
done
common="--init default --data $R/data-all --decoding-layers 6 --thinking-layers 2 --rank 32 --lr 5e-4 --steps 8000 \
  --time-limit ${LIMIT:-3300} --eval-every 1000 --checkpoint-every 100 --heldout-questions bench/data/spec_bench/question.jsonl \
  --threads 1 --resume"
nice -n 10 mtpedge train-dmtd $common --out $R/dmtd-A --release-copy $R/dmtd-A-release.pt > $R/dmtd-A.log 2>&1 &
nice -n 10 mtpedge train-dmtd $common --taus 2 --out $R/dmtd-B --release-copy $R/dmtd-B-release.pt > $R/dmtd-B.log 2>&1 &
wait
echo "both done $(date)"

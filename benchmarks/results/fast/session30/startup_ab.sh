#!/usr/bin/env bash
# Start-up A/B of `mtpedge generate` on a cached default bundle: OLD and NEW are package trees laid out as the
# installed namespace (mtpedge = cli/, with models/, export/, runtime/, bench/ inside), put first on PYTHONPATH.
# Interleaved runs; wall seconds and peak RSS of a one-token answer; the load average before each pair.
#   bash startup_ab.sh OLD_TREE NEW_TREE [PAIRS]
set -euo pipefail
old=$1 new=$2 pairs=${3:-8}
python=${PYTHON:-python}
for i in $(seq "$pairs"); do
  echo "pair $i load $(cut -d' ' -f1 /proc/loadavg)"
  for side in old new; do
    tree=$([ "$side" = old ] && echo "$old" || echo "$new")
    (cd /tmp && PYTHONPATH="$tree" /usr/bin/time -f "$side %e s %M KB" "$python" -m mtpedge generate "hi" \
      --threads 1 --max-new-tokens 1 2>&1 >/dev/null | tail -1)
  done
done

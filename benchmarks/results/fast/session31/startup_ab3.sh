#!/usr/bin/env bash
# Start-up of `mtpedge generate` on a cached default bundle, OLD and NEW package trees (laid out as the installed
# namespace: mtpedge = cli/, with models/, export/, runtime/, bench/ inside, first on PYTHONPATH), interleaved with
# llama.cpp's llama-completion on the same GGUF file: wall seconds and peak RSS of an N-token answer, 1 thread.
#   bash startup_ab3.sh OLD_TREE NEW_TREE GGUF LLAMA_COMPLETION [PAIRS] [TOKENS]
set -euo pipefail
old=$1 new=$2 gguf=$3 llama=$4 pairs=${5:-8} tokens=${6:-1}
python=${PYTHON:-python}
prompt="Name three colours."
for i in $(seq "$pairs"); do
  echo "pair $i load $(cut -d' ' -f1 /proc/loadavg)"
  for side in old new; do
    tree=$([ "$side" = old ] && echo "$old" || echo "$new")
    (cd /tmp && PYTHONPATH="$tree" /usr/bin/time -f "$side %e s %M KB" "$python" -m mtpedge generate "$prompt" \
      --threads 1 --max-new-tokens "$tokens" 2>&1 >/dev/null | tail -1)
  done
  /usr/bin/time -f "llama %e s %M KB" "$llama" -m "$gguf" -p "$prompt" -n "$tokens" --temp 0 -t 1 -tb 1 -c 1024 \
    -no-cnv --no-display-prompt --simple-io 2>&1 >/dev/null | tail -1
done

"""Held-out τ of trained MTP adapters (models/mtp_eval.py), side by side: the yardstick for choosing k, rank
and the sampler head's form (not the training loss), on Spec-Bench questions 5-6 of each category.

    nice -n 19 python benchmarks/mtp_heldout.py ADAPTER.pt [ADAPTER2.pt ...] --candidates 64,256,0 \
        [--heldout runs/heldout-128.npz] [--out benchmarks/results/mtp/heldout.json]

The held-out answers (the base model's greedy answers, 128 tokens + a tail) are made once and kept in
--heldout. Prints one line per adapter; the last line is one JSON document.
"""

from __future__ import annotations

import argparse
import copy
import os
import sys
import time
from pathlib import Path

import torch

from mtpedge.bench.questions import heldout_turns
from mtpedge.bench.report import emit_result
from mtpedge.models.loading import load_model
from mtpedge.models.mtp_eval import HeldOut, heldout_tau, make_heldout
from mtpedge.models.mtp_training import adapter_from_checkpoint, load_checkpoint


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("adapters", nargs="+", help="adapter checkpoints (train-mtp output or a release copy)")
    parser.add_argument("--heldout", default="runs/heldout-128.npz", help="held-out answers (made if missing)")
    parser.add_argument("--tokens", type=int, default=128, help="answer tokens per question")
    parser.add_argument("--candidates", default="64,0", help="sampler shortlists (top-c of the plain logits; 0 = all)")
    parser.add_argument("--out", help="write the JSON report here too")
    args = parser.parse_args()

    torch.set_num_threads(1)
    loaded = load_model(None)
    path = Path(args.heldout)
    if path.is_file():
        heldout = HeldOut.load(path)
    else:
        started = time.perf_counter()
        heldout = make_heldout(loaded, heldout_turns(), args.tokens)
        path.parent.mkdir(parents=True, exist_ok=True)
        heldout.save(path)
        print(f"held-out answers made in {time.perf_counter() - started:.0f} s -> {path}", file=sys.stderr)
    candidates = tuple(int(c) for c in args.candidates.split(","))
    rows = []
    for adapter_file in args.adapters:
        payload = load_checkpoint(adapter_file)
        adapter = adapter_from_checkpoint(copy.deepcopy(loaded.decoder), payload)  # LoRA attaches in place
        started = time.perf_counter()
        result = heldout_tau(adapter, heldout, candidates)
        rows.append({"adapter": adapter_file, "mtp_config": payload["mtp_config"], "step": payload["step"],
                     "seconds": round(time.perf_counter() - started, 1), **result})
        print(f"{adapter_file} (step {payload['step']}): " + " ".join(
            f"{k} {v}" for k, v in result.items()), flush=True)
    report = {"questions": len(heldout.prompts), "budget": heldout.budget, "load_average": os.getloadavg()[0],
              "adapters": rows}
    emit_result(report, args.out)


if __name__ == "__main__":
    main()

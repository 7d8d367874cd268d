"""Held-out quality of a DMTD model (default: the one shipped for SmolLM2) against the base model.

    python benchmarks/dmtd_eval.py [--checkpoint dmtd.pt] --out benchmarks/results/dmtd/heldout.json

The figures are models/dmtd_eval.py's (teacher-forced): `dmtd-spec`'s τ and per-draft accuracy on held-out
Spec-Bench questions (questions 5-6 of each category: the benchmark reports on the first 4), and the lossy
`dmtd`'s top-1 agreement with the base model and perplexity at each τ, on the held text and on the base's own
answers. Speed, τ and losslessness of both drafters at run time are a bench run:
    mtpedge bench --methods none,dmtd-spec,dmtd:tau=2,dmtd:tau=3 --limit 4
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np
import torch

from mtpedge.bench.questions import heldout_turns
from mtpedge.export.dmtd_bundle import resolve_dmtd
from mtpedge.export.quality import HELD_TEXT
from mtpedge.models.dmtd_eval import evaluate
from mtpedge.models.dmtd_train import load_dmtd
from mtpedge.models.loading import load_model
from mtpedge.models.mtp_eval import make_heldout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", default="default", help="a DMTD checkpoint (default: the shipped model)")
    parser.add_argument("--out", type=Path, required=True, help="JSON file the figures are written to")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    started = time.perf_counter()
    loaded = load_model(None)
    model, state = load_dmtd(resolve_dmtd(args.checkpoint), loaded)
    heldout = make_heldout(loaded, heldout_turns(), 128)
    held = np.asarray(loaded.tokenizer(HELD_TEXT, add_special_tokens=False)["input_ids"][:512], np.int64)
    figures = evaluate(loaded.decoder.eval(), model, heldout, held)
    doc = {"checkpoint": str(args.checkpoint), "config": state["config"], "step": state["step"],
           "data_tokens": state.get("data_tokens"), "figures": figures,
           "seconds": round(time.perf_counter() - started), "load_average": os.getloadavg()}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1))
    print(json.dumps(doc, indent=1))


if __name__ == "__main__":
    main()

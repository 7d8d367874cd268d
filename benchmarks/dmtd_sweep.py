"""Short DMTD training runs side by side, to choose m (trained thinking layers), D (decoding layers) and the LoRA
rank by held-out figures (models/dmtd_eval.py), not training loss.

Every run trains on the same snapshot of the data with the same seed and steps; the frozen prefix's output is
computed once at the lowest tap of the sweep and shared (each run continues it through the frozen layers up to
its own tap, under no_grad), which is what makes a sweep affordable on two cores.

    python benchmarks/dmtd_sweep.py --data DIR --configs 0x2,2x2,4x2 --steps 600 --out runs/sweep.json
    (a config is MxD or MxDrRANK)
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np
import torch

from mtpedge.bench.questions import SPEC_BENCH, heldout_turns
from mtpedge.export.quality import HELD_TEXT
from mtpedge.models.checkpoint import read_checkpoint
from mtpedge.models.dmtd import DmtdConfig, DmtdModel, run_causal
from mtpedge.models.dmtd_eval import evaluate
from mtpedge.models.dmtd_train import DistillStream, TrainSettings, train_dmtd
from mtpedge.models.loading import load_model
from mtpedge.models.mtp_eval import HeldOut, make_heldout


def parse_config(text: str, alpha_per_rank: float) -> DmtdConfig:
    shape, _, rank = text.partition("r")
    m, d = (int(x) for x in shape.split("x"))
    rank = int(rank or 32)
    return DmtdConfig(decoding_layers=d, thinking_layers=m, lora_rank=rank, lora_alpha=alpha_per_rank * rank)


class SharedTaps:
    """Tapped states at layer `low` for every sequence (float16, computed once), continued to any higher tap."""

    def __init__(self, decoder, low: int) -> None:
        self.decoder, self.low, self.states = decoder, low, {}

    def __call__(self, tokens: np.ndarray, tap: int) -> torch.Tensor:
        key = tokens.tobytes()
        if key not in self.states:
            from mtpedge.models.dmtd import tapped_states

            self.states[key] = tapped_states(self.decoder, tokens, self.low).half()
        with torch.no_grad():
            return run_causal(self.decoder, self.decoder.model.layers[self.low:tap], self.states[key].float())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True)
    parser.add_argument("--configs", default="0x2,2x2,4x2")
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--lr", type=float, default=5e-4)
    parser.add_argument("--alpha-per-rank", type=float, default=1.0)
    parser.add_argument("--eval-every", type=int, default=200)
    parser.add_argument("--questions", default=str(SPEC_BENCH))
    parser.add_argument("--work", default="runs/sweep")
    parser.add_argument("--out", required=True)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    loaded = load_model(None)
    decoder = loaded.decoder.eval()
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    cache = work / "heldout.npz"
    if cache.is_file():
        heldout = HeldOut.load(cache)
    else:
        heldout = make_heldout(loaded, heldout_turns(args.questions), 128)
        heldout.save(cache)
    held = np.asarray(loaded.tokenizer(HELD_TEXT, add_special_tokens=False)["input_ids"][:512], np.int64)
    configs = [parse_config(c, args.alpha_per_rank) for c in args.configs.split(",")]
    taps = SharedTaps(decoder, min(c.tap_layer(decoder.cfg.num_layers) for c in configs))
    original = DistillStream.tapped
    results = json.loads(Path(args.out).read_text()) if Path(args.out).is_file() else {}
    for config, name in zip(configs, args.configs.split(","), strict=True):
        key = f"{name}_lr{args.lr}_s{args.steps}"
        if key in results:
            continue
        tap = config.tap_layer(decoder.cfg.num_layers)
        DistillStream.tapped = lambda self, tokens, tap=tap: taps(tokens, tap)
        settings = TrainSettings(model=config, steps=args.steps, lr=args.lr, eval_every=args.eval_every,
                                 checkpoint_every=args.steps, reload_every=0)
        started = time.perf_counter()
        out = work / key
        if (out / "dmtd.pt").is_file():
            os.remove(out / "dmtd.pt")
        untrained = evaluate(decoder, DmtdModel(decoder, config), heldout, held)
        print(key, "untrained", untrained, flush=True)
        ckpt = train_dmtd(loaded, Path(args.data), out, settings, progress=lambda s, key=key: print(key, s, flush=True),
                          evaluate=lambda model: evaluate(decoder, model, heldout, held))
        state = read_checkpoint(ckpt, "DMTD", "")
        losses = [h[1] for h in state["history"][-100:]]
        results[key] = {"config": config.to_dict(), "lr": args.lr, "steps": args.steps,
                        "seconds": round(time.perf_counter() - started), "untrained": untrained,
                        "heldout": state["heldout"], "loss_tail": float(np.mean(losses)),
                        "data_tokens": state["data_tokens"], "load_average": os.getloadavg()}
        Path(args.out).write_text(json.dumps(results, indent=1))
    DistillStream.tapped = original


if __name__ == "__main__":
    main()

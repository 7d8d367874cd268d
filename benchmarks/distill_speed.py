"""Self-distillation speed: the batched PyTorch generator vs the first one (one sequence at a time, ONNX).

Same model weights (the embedded SmolLM2: its float32 bundle for the ONNX generator, the same GGUF loaded
into the PyTorch decoder), the same prompts (the first of the distillation plan's first stage, greedy), one
thread each. Every round runs every method in a rotated order, so machine noise hits all alike; a method's
figure is its response tokens over its wall time, summed over rounds. Greedy answers are compared with the
ONNX generator's token for token (float32 on two engines: a near-tie can flip a token). Prints a table; the
last line is one JSON document.

    nice -n 19 python benchmarks/distill_speed.py --prompts 128 --max-new-tokens 64 --rounds 2 \
        --batches 32,64 --shrink-batch 32 --out benchmarks/results/distill/speed.json
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable

import torch

from mtpedge.bench.report import emit_result
from mtpedge.bench.runner import rotated
from mtpedge.bundles import ensure_bundle
from mtpedge.models.distill_batch import BatchedGenerator, GenerationConfig, Request
from mtpedge.models.distill_data import distill_one
from mtpedge.models.distill_run import DistillPlan, StageData, plan_stage
from mtpedge.models.loading import load_model
from mtpedge.runtime.engine import Engine


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=128)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--onnx-prompts", type=int, default=16,
                        help="the first generator answers only the first N prompts (its rate does not depend on N)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--batches", default="32,64", help="batch sizes of the refill scheduler")
    parser.add_argument("--shrink-batch", type=int, default=32, help="batch size of the shrink scheduler (0: skip)")
    parser.add_argument("--out", help="write the JSON report here too")
    args = parser.parse_args()

    torch.set_num_threads(1)
    engine = Engine.load(ensure_bundle(None, None, 1024), threads=1)
    loaded = load_model(None)
    first = plan_stage("first", DistillPlan(), {"questions": StageData()}, None)
    prompts = [c.messages[-1][1] for c in first if c.temperature == 0][: args.prompts]
    ids = [engine.tokenizer.encode_chat([{"role": "user", "content": p}]) for p in prompts]
    n = args.max_new_tokens

    def onnx_one_at_a_time() -> list[list[int]]:
        return [distill_one(engine, p, n).response_ids.tolist() for p in prompts[: args.onnx_prompts]]

    def batched(batch: int, refill: bool):
        generator = BatchedGenerator(loaded.decoder, loaded.stop_token_ids,
                                     GenerationConfig(max_new_tokens=n, batch=batch, refill=refill))
        return lambda: [a.response_ids.tolist() for a in generator.generate([Request(x) for x in ids])]

    methods = {"onnx one at a time (first generator)": onnx_one_at_a_time}
    for b in (int(x) for x in args.batches.split(",")):
        methods[f"torch batch {b}, refill"] = batched(b, True)
    if args.shrink_batch:
        methods[f"torch batch {args.shrink_batch}, shrink"] = batched(args.shrink_batch, False)
    seconds, tokens, outputs, load = timed_rounds(methods, args.rounds)
    print(f"\n{len(prompts)} prompts x <= {n} new tokens, {args.rounds} rounds, 1 thread; load average "
          f"{min(load):.1f}-{max(load):.1f}")
    report = {"prompts": len(prompts), "max_new_tokens": n, "rounds": args.rounds, "threads": 1,
              "load_average": [round(x, 2) for x in load], "methods": compare(seconds, tokens, outputs)}
    emit_result(report, args.out)


def timed_rounds(methods: dict[str, Callable[[], list[list[int]]]], rounds: int):
    """Every method once a round, in an order rotated per round; (seconds, tokens, last outputs) per method and
    the load average before and after each round."""
    names = list(methods)
    seconds = dict.fromkeys(names, 0.0)
    tokens = dict.fromkeys(names, 0)
    outputs: dict[str, list[list[int]]] = {}
    load = [os.getloadavg()[0]]
    for r in range(rounds):
        for name in rotated(names, r):
            started = time.perf_counter()
            out = methods[name]()
            seconds[name] += time.perf_counter() - started
            tokens[name] += sum(len(x) for x in out)
            outputs[name] = out
            print(f"round {r + 1}: {name}: {sum(len(x) for x in out)} tokens in "
                  f"{time.perf_counter() - started:.1f} s", file=sys.stderr, flush=True)
        load.append(os.getloadavg()[0])
    return seconds, tokens, outputs, load


def compare(seconds: dict[str, float], tokens: dict[str, int], outputs: dict[str, list[list[int]]]) -> list[dict]:
    """A row a method: its rate, against the first method's, and how many answers equal the first's (printed too)."""
    names = list(seconds)
    reference = outputs[names[0]]
    base_rate = tokens[names[0]] / seconds[names[0]]
    rows = []
    print(f"{'method':40s} {'tok/s':>8s} {'vs first':>9s} {'answers equal to the ONNX greedy':>34s}")
    for name in names:
        rate = tokens[name] / seconds[name]
        same = sum(a == b for a, b in zip(outputs[name][: len(reference)], reference, strict=True))
        rows.append({"method": name, "tokens_per_s": round(rate, 2), "speedup": round(rate / base_rate, 2),
                     "tokens": tokens[name], "seconds": round(seconds[name], 1), "same_as_onnx": same})
        print(f"{name:40s} {rate:8.1f} {rate / base_rate:8.2f}x {same:>28d}/{len(reference)}")
    return rows

if __name__ == "__main__":
    main()

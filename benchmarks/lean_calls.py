"""Do context buckets pay? Interleaved A/B runs on one bucketed bundle, in one process.

    variants   buckets   the runtime's default: the smallest context bucket that holds the cache
               full      the same bundle with a cache of the full context only (every call reads C)
    graph calls   median / min ms of one call of each decode width at each bucket (chain blocks)
    decoding      plain greedy decoding of Spec-Bench prompts (first turns), tokens/s per variant, the same
                  prompts interleaved variant by variant; outputs must be identical

    python benchmarks/lean_calls.py BUNDLE [--prompts 8] [--max-new-tokens 128] [--threads 1] [--calls 20]

Prints tables; the last line is one JSON document.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from mtpedge.bench.questions import SPEC_BENCH, load_questions, round_robin  # noqa: E402
from mtpedge.bench.runner import rotated  # noqa: E402
from mtpedge.runtime.engine import Engine  # noqa: E402
from mtpedge.runtime.generate import generate  # noqa: E402
from mtpedge.runtime.kv_cache import KVCache  # noqa: E402


def tuning_questions() -> list:
    """Questions 5 and 6 of every category (the report set is the first 4), question 5 of every category first."""
    return round_robin(load_questions(SPEC_BENCH, limit=2, skip=4))


def engines(bundle: Path, threads: int) -> dict[str, Engine]:
    made = {"buckets": Engine.load(bundle, threads=threads), "full": Engine.load(bundle, threads=threads)}
    full = made["full"]
    cfg = full.config
    full.cache = KVCache(cfg.num_layers, cfg.num_kv_heads, full.context, cfg.head_dim)  # one bucket: the context
    return made


def call_times(engine: Engine, calls: int) -> dict[str, dict[str, float]]:
    """{"cl{C} w{W}": {"median_ms", "min_ms"}} for every bucket and decode width, calls interleaved."""
    keys, times = [], {}
    widths = sorted({g.width for g in engine.manifest.graphs if g.kind == "decode"})
    for context in engine.manifest.context_buckets:
        for width in widths:
            keys.append((context, width))
            times[(context, width)] = []
    for _ in range(calls + 2):
        for context, width in keys:
            engine.reset()
            engine.cache.n_past = max(0, context - width)  # the smallest bucket holding this is `context`
            out = engine.run_block(engine.embed(np.arange(width)), np.arange(-1, width - 1))
            times[(context, width)].append(out.seconds * 1e3)
    engine.reset()
    return {f"cl{c} w{w}": {"median_ms": statistics.median(t[2:]), "min_ms": min(t[2:])}
            for (c, w), t in times.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bundle", type=Path)
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--calls", type=int, default=20)
    args = parser.parse_args(argv)
    made = engines(args.bundle, args.threads)
    doc = {"bundle": str(args.bundle), "threads": args.threads, "load_average_start": os.getloadavg()}
    base = made["buckets"]
    doc["calls"] = call_times(base, args.calls)
    print(f"## one graph call, {args.threads} thread(s) (median / min of {args.calls}, load {os.getloadavg()[0]:.1f})")
    for key, t in doc["calls"].items():
        print(f"  {key:<12} {t['median_ms']:7.2f} / {t['min_ms']:7.2f} ms")
    prompts = [base.tokenizer.encode_chat([{"role": "user", "content": q.turns[0]}])
               for q in tuning_questions()[: args.prompts]]
    rates: dict[str, list[float]] = {name: [] for name in made}
    outputs: dict[str, list[list[int]]] = {name: [] for name in made}
    for i, prompt in enumerate(prompts):
        for name in rotated(list(made), i):
            result = generate(made[name], prompt, args.max_new_tokens)
            rates[name].append(result.stats.tokens_per_second)
            outputs[name].append(result.token_ids)
    same = {name: outputs[name] == outputs["buckets"] for name in made}
    doc["decoding"] = {name: {"mean_tokens_per_s": statistics.fmean(r), "same_output": same[name]}
                       for name, r in rates.items()}
    print(f"\n## plain decoding, {len(prompts)} prompts x {args.max_new_tokens} tokens (load {os.getloadavg()[0]:.1f})")
    ref = doc["decoding"]["buckets"]["mean_tokens_per_s"]
    for name, d in doc["decoding"].items():
        print(f"  {name:<16} {d['mean_tokens_per_s']:6.1f} tok/s  x{d['mean_tokens_per_s'] / ref:.2f}  "
              f"same output: {d['same_output']}")
    doc["load_average_end"] = os.getloadavg()
    print(json.dumps(doc))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

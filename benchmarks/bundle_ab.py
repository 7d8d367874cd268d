"""Two bundles of one model, A/B in one process: what one decode call of each width costs, and plain decoding.

    python benchmarks/bundle_ab.py BUNDLE_A BUNDLE_B [--threads 1] [--calls 30] [--prompts 4] [--max-new-tokens 64]

graph calls: median / min ms of one call of each decode width from a cache of `--past` positions (the smallest
bucket that holds it), the bundles and widths interleaved call by call. decoding: plain greedy decoding of the
tuning prompts (benchmarks/lean_calls.py), bundles alternating per prompt; tokens/s. The last line is JSON.
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
from lean_calls import tuning_questions  # noqa: E402

from mtpedge.bench.runner import rotated  # noqa: E402
from mtpedge.runtime.engine import Engine  # noqa: E402
from mtpedge.runtime.generate import generate  # noqa: E402


def call_times(engines: dict[str, Engine], past: int, calls: int) -> dict[str, dict[str, float]]:
    widths = sorted({g.width for g in next(iter(engines.values())).manifest.graphs if g.kind == "decode"})
    times: dict[tuple[str, int], list[float]] = {(name, w): [] for name in engines for w in widths}
    for _ in range(calls + 2):
        for (name, width), record in times.items():
            engine = engines[name]
            engine.reset()
            engine.cache.n_past = past
            record.append(engine.run_block(engine.embed(np.arange(width)), np.arange(-1, width - 1)).seconds * 1e3)
    return {f"{name} w{w}": {"median_ms": statistics.median(t[2:]), "min_ms": min(t[2:])}
            for (name, w), t in times.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bundles", type=Path, nargs=2)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--calls", type=int, default=30)
    parser.add_argument("--past", type=int, default=200)
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    args = parser.parse_args(argv)
    engines = {b.name: Engine.load(b, threads=args.threads) for b in args.bundles}
    doc = {"bundles": [str(b) for b in args.bundles], "threads": args.threads, "load_average_start": os.getloadavg()}
    doc["calls"] = call_times(engines, args.past, args.calls)
    print(f"## one decode call after {args.past} positions, {args.threads} thread(s), median / min of {args.calls}")
    for key, t in doc["calls"].items():
        print(f"  {key:<60} {t['median_ms']:7.2f} / {t['min_ms']:7.2f} ms")
    first = next(iter(engines.values()))
    prompts = [first.tokenizer.encode_chat([{"role": "user", "content": q.turns[0]}])
               for q in tuning_questions()[: args.prompts]]
    rates: dict[str, list[float]] = {name: [] for name in engines}
    for i, prompt in enumerate(prompts):
        for name in rotated(list(engines), i):
            rates[name].append(generate(engines[name], prompt, args.max_new_tokens).stats.tokens_per_second)
    doc["decoding_tokens_per_s"] = {name: statistics.fmean(r) for name, r in rates.items()}
    print(f"## plain decoding, {len(prompts)} prompts x {args.max_new_tokens} tokens")
    for name, rate in doc["decoding_tokens_per_s"].items():
        print(f"  {name:<60} {rate:6.1f} tok/s")
    doc["load_average_end"] = os.getloadavg()
    print(json.dumps(doc))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

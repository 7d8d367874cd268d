"""Do idle thread-pool workers slow the next graph? Spinning on and off after each run, A/B in one process.

    python benchmarks/spinning_ab.py BUNDLE [--threads 2] [--prompts 13] [--max-new-tokens 96] [--out FILE.json]

Every graph of a bundle is its own onnxruntime session with its own intra-op thread pool, and by default a pool's
workers spin for a while after a run ends. While one width's workers spin, a call of another width competes
with them for the cores. Plain decoding calls one graph, but a drafter's steps switch widths. The variants differ
only in `session.force_spinning_stop`: "spinning" (0, onnxruntime's default) and "stop" (1: workers stop
spinning when a run returns and are woken by the next one).

Reported per variant:
- its cost table, measured in memory with the widths taking turns (runtime/cost_measure.py);
- plain decoding and the default drafter (cost-aware `lookup`, sized by that variant's table) on the tuning
  questions (5 and 6 of each category, first turn: benchmarks/lean_calls.py), the four runs of a question in a
  rotating order: decoding tokens/s, τ, and whether each drafted answer equals plain decoding's.
The load average is recorded at the start and the end; the last line is JSON.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from lean_calls import tuning_questions  # noqa: E402

from mtpedge.bench.report import emit_result  # noqa: E402
from mtpedge.bench.runner import rotated  # noqa: E402
from mtpedge.runtime.cost_measure import measure_cost_table  # noqa: E402
from mtpedge.runtime.drafters import make_drafter  # noqa: E402
from mtpedge.runtime.engine import Engine  # noqa: E402
from mtpedge.runtime.generate import generate  # noqa: E402

VARIANTS = {"spinning": {"session.force_spinning_stop": "0"}, "stop": {"session.force_spinning_stop": "1"}}


def decode(engine: Engine, ids: list[int], drafter_name: str, tokens: int) -> dict:
    drafter = make_drafter(drafter_name, engine) if drafter_name != "none" else None
    result = generate(engine, ids, tokens, drafter=drafter, stop_token_ids=set(), on_overflow="stop")
    stats = result.stats
    return {"tokens": result.token_ids, "seconds": stats.elapsed_seconds - stats.prefill_seconds,
            "decoded": stats.decode_calls * stats.tokens_per_call, "calls": stats.decode_calls}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bundle", help="e.g. the fast default's, ~/.cache/mtpedge/bundles/*-fused")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--prompts", type=int, default=13)
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    load_start = os.getloadavg()[0]
    engines = {name: Engine.load(args.bundle, threads=args.threads, session_options=options)
               for name, options in VARIANTS.items()}
    for engine in engines.values():
        engine.cost_table = measure_cost_table(engine)
    runs = [(variant, drafter) for variant in engines for drafter in ("none", "lookup")]
    totals = {run: {"decoded": 0.0, "seconds": 0.0, "calls": 0, "same_as_plain": 0} for run in runs}
    questions = tuning_questions()[: args.prompts]
    for i, question in enumerate(questions):
        ids = engines["spinning"].tokenizer.encode_chat([{"role": "user", "content": question.turns[0]}])
        done = {run: decode(engines[run[0]], ids, run[1], args.max_new_tokens) for run in rotated(runs, i)}
        plain = done[("spinning", "none")]["tokens"]
        for run, r in done.items():
            t = totals[run]
            t["decoded"] += r["decoded"]
            t["seconds"] += r["seconds"]
            t["calls"] += r["calls"]
            t["same_as_plain"] += r["tokens"] == plain
        print(f"{i + 1}/{len(questions)} {question.category}: " + ", ".join(
            f"{v}/{d} {r['decoded'] / r['seconds']:.1f}" for (v, d), r in done.items()), file=sys.stderr, flush=True)
    report = {"bundle": str(args.bundle), "threads": args.threads, "questions": len(questions),
              "max_new_tokens": args.max_new_tokens, "load_average": [load_start, os.getloadavg()[0]],
              "cost_tables_ms": {name: {w: round(s * 1e3, 2) for w, s in e.cost_table.seconds.items()}
                                 for name, e in engines.items()},
              "runs": {}}
    base = totals[("spinning", "none")]["decoded"] / totals[("spinning", "none")]["seconds"]
    for (variant, drafter), t in totals.items():
        rate = t["decoded"] / t["seconds"]
        report["runs"][f"{variant}/{drafter}"] = {
            "tokens_per_s": round(rate, 2), "vs_spinning_plain": round(rate / base, 3),
            "tau": round(t["decoded"] / max(t["calls"], 1), 3),
            "same_as_plain": f"{t['same_as_plain']}/{len(questions)}"}
    emit_result(report, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())

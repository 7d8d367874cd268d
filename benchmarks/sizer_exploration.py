"""Does the sizer's exploration pay? Cost-aware `lookup` with and without it, beside plain decoding, interleaved.

    python benchmarks/sizer_exploration.py BUNDLE [--per-category 2] [--max-new-tokens 128] [--threads 1]
        [--explore-every 32] [--out FILE.json]

Per Spec-Bench report question (the first `--per-category` of each category, first turn; the tuning questions
are 5 and 6, benchmarks/lean_calls.py), three decodes in a rotating order on one engine and its cost table:
plain decoding, `lookup` sized without exploration (explore_every = 0, the sizer before it explored) and
`lookup` with it (runtime/tree_sizing.StepSizer). Reports decoding tokens/s of each (the tokens the decode calls
committed over the time after prefill), τ, the steps that explored, and
whether each drafted answer equals plain decoding's. The load average is recorded at the start and the end.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from mtpedge.bench.questions import SPEC_BENCH, load_questions  # noqa: E402
from mtpedge.bench.report import emit_result  # noqa: E402
from mtpedge.bundles import attach_cost_table  # noqa: E402
from mtpedge.runtime.drafters import make_drafter  # noqa: E402
from mtpedge.runtime.engine import Engine  # noqa: E402
from mtpedge.runtime.generate import generate  # noqa: E402

METHODS = ("plain", "lookup-no-explore", "lookup")


def decode(engine: Engine, ids: list[int], method: str, tokens: int, explore_every: int) -> dict:
    drafter = None
    if method != "plain":
        drafter = make_drafter("lookup", engine)
        drafter.sizer.explore_every = 0 if method == "lookup-no-explore" else explore_every
    result = generate(engine, ids, tokens, drafter=drafter, stop_token_ids=set(), on_overflow="stop")
    stats = result.stats
    return {"tokens": result.token_ids, "seconds": stats.elapsed_seconds - stats.prefill_seconds,
            "decoded": stats.decode_calls * stats.tokens_per_call, "calls": stats.decode_calls,
            "explored": drafter.sizer.explored if drafter else 0}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bundle", help="e.g. the fast default's, .cache/mtpedge/bundles/*-fused")
    parser.add_argument("--per-category", type=int, default=2)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--explore-every", type=int, default=32)
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    bundle = args.bundle
    engine = Engine.load(bundle, threads=args.threads)
    attach_cost_table(engine, "measured", say=lambda m: print(m, file=sys.stderr))  # cached per bundle and machine
    load_start = os.getloadavg()[0]
    totals = {m: {"decoded": 0.0, "seconds": 0.0, "calls": 0, "explored": 0, "same_as_plain": 0} for m in METHODS}
    questions = load_questions(SPEC_BENCH, limit=args.per_category)
    for i, question in enumerate(questions):
        ids = engine.tokenizer.encode_chat([{"role": "user", "content": question.turns[0]}])
        order = METHODS[i % 3:] + METHODS[: i % 3]
        runs = {m: decode(engine, ids, m, args.max_new_tokens, args.explore_every) for m in order}
        for m, r in runs.items():
            t = totals[m]
            t["decoded"] += r["decoded"]
            t["seconds"] += r["seconds"]
            t["calls"] += r["calls"]
            t["explored"] += r["explored"]
            t["same_as_plain"] += r["tokens"] == runs["plain"]["tokens"]
        print(f"{i + 1}/{len(questions)} {question.category}: " + ", ".join(
            f"{m} {r['decoded'] / r['seconds']:.1f} tok/s" for m, r in runs.items()), file=sys.stderr, flush=True)
    report = {"bundle": str(bundle), "threads": args.threads, "questions": len(questions),
              "explore_every": args.explore_every, "cost_table": engine.cost_table.seconds,
              "load_average": [load_start, os.getloadavg()[0]], "methods": {}}
    for m, t in totals.items():
        report["methods"][m] = {"tokens_per_s": round(t["decoded"] / t["seconds"], 2),
                                "tau": round(t["decoded"] / max(t["calls"], 1), 3), "explored_steps": t["explored"],
                                "same_as_plain": f"{t['same_as_plain']}/{len(questions)}"}
    plain = report["methods"]["plain"]["tokens_per_s"]
    for m in METHODS:
        report["methods"][m]["vs_plain"] = round(report["methods"][m]["tokens_per_s"] / plain, 3)
    emit_result(report, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())

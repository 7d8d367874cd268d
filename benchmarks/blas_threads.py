"""Host time per decode step with numpy's BLAS at its own thread count vs limited to one thread by generate().

    MTPEDGE_CACHE=... nice -n 19 python benchmarks/blas_threads.py [--limit 1] [--max-new-tokens 64] [--drafter mtp]

generate() limits BLAS to one thread for the length of each call (runtime/generate.py says why). Three ways run
interleaved per question (the order rotated) in one process, on the default model's bundle with the shipped
adapter, first turns of the first `--limit` Spec-Bench questions of every category, onnxruntime on one thread:
    unlimited    generate without the limit (BLAS at its default thread count)
    scoped       generate as shipped (limited during the call, restored after)
    process      the limit set once around every call, as the engine did for the whole process before
Host ms per step = (decode time - decode graph time) / decode calls. The outputs must all be the same.
Prints a table; the last line is one JSON document.
"""

from __future__ import annotations

import argparse
import json
import statistics

from threadpoolctl import threadpool_info, threadpool_limits

from mtpedge.bench.machine import load_average
from mtpedge.bench.questions import SPEC_BENCH, load_questions
from mtpedge.bundles import ensure_bundle
from mtpedge.runtime.drafters import make_drafter
from mtpedge.runtime.engine import Engine
from mtpedge.runtime.generate import generate

unlimited = generate.__wrapped__  # the loop without the decorator's limit


def process_wide(*args, **kwargs):
    with threadpool_limits(limits=1, user_api="blas"):
        return unlimited(*args, **kwargs)


WAYS = {"unlimited": unlimited, "scoped": generate, "process": process_wide}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=1, help="questions per category")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--drafter", default="mtp")
    args = parser.parse_args()
    engine = Engine.load(ensure_bundle(None, None, 1024, mtp=True), threads=1)
    blas = [f"{i['internal_api']} {i['num_threads']} threads" for i in threadpool_info() if i["user_api"] == "blas"]
    questions = load_questions(SPEC_BENCH, limit=args.limit)
    host: dict[str, list[float]] = {way: [] for way in WAYS}
    tps: dict[str, list[float]] = {way: [] for way in WAYS}
    same = 0
    started_load = load_average()
    for index, question in enumerate(questions):
        prompt = engine.tokenizer.encode_chat([{"role": "user", "content": question.turns[0]}])
        names = list(WAYS)[index % len(WAYS):] + list(WAYS)[: index % len(WAYS)]
        outputs = {}
        for way in names:
            result = WAYS[way](engine, prompt, args.max_new_tokens, drafter=make_drafter(args.drafter, engine),
                               on_overflow="stop")
            s = result.stats
            decode_graph = s.graph_seconds - s.prefill_seconds  # prefill's host work is small beside its graphs
            host[way].append(1e3 * (s.decode_seconds - decode_graph) / max(1, s.decode_calls))
            tps[way].append(s.tokens_per_second)
            outputs[way] = result.token_ids
        same += len({tuple(ids) for ids in outputs.values()}) == 1
        print(f"[{index + 1}/{len(questions)}] {question.category:<16} " + "  ".join(
            f"{way} {host[way][-1]:5.1f} ms" for way in WAYS), flush=True)
    summary = {way: {"host_ms_per_step_median": round(statistics.median(host[way]), 2),
                     "tokens_per_s_mean": round(statistics.fmean(tps[way]), 2),
                     "tokens_per_s_vs_unlimited": round(statistics.fmean(tps[way]) / statistics.fmean(
                         tps["unlimited"]), 3)} for way in WAYS}
    print(f"\n{'way':<10}{'host ms/step':>14}{'tok/s':>8}{'vs unlimited':>14}")
    for way, s in summary.items():
        print(f"{way:<10}{s['host_ms_per_step_median']:>14.2f}{s['tokens_per_s_mean']:>8.2f}"
              f"{s['tokens_per_s_vs_unlimited']:>13.3f}x")
    print(f"identical outputs: {same}/{len(questions)} questions")
    print(json.dumps({"benchmark": "blas_threads", "drafter": args.drafter, "questions": len(questions),
                      "max_new_tokens": args.max_new_tokens, "blas": blas, "identical_outputs": same,
                      "load_average": [started_load, load_average()], "summary": summary}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

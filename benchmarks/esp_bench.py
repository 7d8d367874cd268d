"""τ, speed and losslessness of the drafters on Spec-Bench questions, measured interleaved in one process.

    python benchmarks/esp_bench.py --bundle /tmp/esp-bundle --per-category 9 --max-new-tokens 128

For every question, each configuration (none, esp per mask init, lookup, hybrid) runs in turn (the order
rotates per question, so machine noise hits all alike); every drafter's greedy output is compared token for
token with `none`. Also measured: the graph-call cost at each decode width. (Earlier runs also timed naive vs
cached attention-bias construction; the naive builder is now only the test oracle.) Prints tables; the last
line is one JSON document.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

from mtpedge.bench.questions import SPEC_BENCH as QUESTIONS
from mtpedge.runtime.drafters import make_drafter
from mtpedge.runtime.engine import Engine
from mtpedge.runtime.generate import generate


def load_questions(path: Path, per_category: int) -> list[dict]:
    by_category: dict[str, list[dict]] = defaultdict(list)
    for line in path.read_text().splitlines():
        q = json.loads(line)
        by_category[q["category"]].append(q)
    picked = {}
    for category in sorted(by_category):
        items = by_category[category]
        step = max(1, len(items) // per_category)
        picked[category] = items[::step][:per_category]  # spread over the category, deterministic
    # round-robin over categories, so that a run cut short by --time-limit still covers every category
    return [q for i in range(per_category) for cat in sorted(picked) if i < len(picked[cat])
            for q in [picked[cat][i]]]


def configs(args) -> list[tuple[str, str, dict]]:
    out = [("none", "none", {})]
    for init in filter(None, args.inits.split(",")):
        out.append((f"esp-{init}", "esp", {"mask_init": init, "masks": args.masks, "width": args.esp_width}))
    if args.lookup_width:
        out.append(("lookup", "lookup", {"width": args.lookup_width}))
    if not args.hybrid:
        out.append(("hybrid", "hybrid", {"masks": args.masks, "width": args.hybrid_width}))
    for text in args.hybrid:  # '{"label": "hybrid-w32", "width": 32, ...}'
        options = json.loads(text)
        out.append((options.pop("label", f"hybrid-{len(out)}"), "hybrid", options))
    return out


def call_cost(engine: Engine, reps: int) -> dict[int, float]:
    """Median ms of one decode call at each width (full static ESP-shaped block), interleaved."""
    widths = sorted(e.width for e in engine.graphs.entries if e.kind == "decode")
    engine.reset()
    engine.prefill(list(range(100, 400)))
    times: dict[int, list[float]] = {w: [] for w in widths}
    for _ in range(reps):
        for w in widths:
            parents = np.arange(-1, w - 1)
            embeds = engine.embed(np.arange(w) + 500)
            started = time.perf_counter()
            engine.run_block(embeds, parents)
            times[w].append(1000 * (time.perf_counter() - started))
    return {w: round(statistics.median(t), 2) for w, t in times.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bundle", required=True)
    parser.add_argument("--questions", default=str(QUESTIONS))
    parser.add_argument("--per-category", type=int, default=2)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--inits", default="soft,hard,sample,mean", help="esp mask inits ('' = no esp)")
    parser.add_argument("--masks", type=int, default=1)
    parser.add_argument("--esp-width", type=int, default=16)
    parser.add_argument("--lookup-width", type=int, default=8, help="0 = no lookup")
    parser.add_argument("--hybrid-width", type=int, default=16)
    parser.add_argument("--hybrid", action="append", default=[],
                        help='a hybrid configuration as JSON options plus "label" (repeatable; replaces the default '
                        'hybrid), e.g. \'{"label": "hybrid-w32", "width": 32}\'')
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--cost-reps", type=int, default=15)
    parser.add_argument("--time-limit", type=float, default=None, help="seconds; stop after the current question")
    args = parser.parse_args()

    engine = Engine.load(args.bundle, threads=args.threads)
    cost = call_cost(engine, args.cost_reps)
    print("graph call cost, ms (median): " + ", ".join(f"width {w}: {ms}" for w, ms in cost.items()), flush=True)

    setups = configs(args)
    drafters = {label: make_drafter(name, engine, **opts) for label, name, opts in setups}
    questions = load_questions(Path(args.questions), args.per_category)
    tok = engine.tokenizer
    rows: dict[str, list[dict]] = defaultdict(list)
    mismatches: list[dict] = []
    started = time.perf_counter()
    done = 0
    for qi, q in enumerate(questions):
        if args.time_limit and time.perf_counter() - started > args.time_limit:
            print(f"time limit reached after {qi} of {len(questions)} questions", flush=True)
            break
        done = qi + 1
        prompt = tok.encode_chat([{"role": "user", "content": q["turns"][0]}])
        shift = qi % len(setups)
        outputs = {}
        for label, _, _ in setups[shift:] + setups[:shift]:
            result = generate(engine, prompt, args.max_new_tokens, drafter=drafters[label])
            s = result.stats
            outputs[label] = result.token_ids
            # prefill runs before the decode loop: its graph time is about prefill_s, the rest is decoding
            rows[label].append({"category": q["category"], "tokens": s.new_tokens, "calls": s.decode_calls,
                                "accepted": sum(k * v for k, v in s.accepted_histogram.items()),
                                "decode_s": s.decode_seconds, "decode_graph_s": s.graph_seconds - s.prefill_seconds,
                                "tau": s.tokens_per_call})
        for label in outputs:
            if outputs[label] != outputs["none"]:
                a, b = outputs[label], outputs["none"]
                first = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
                mismatches.append({"question": q["question_id"], "drafter": label, "index": first})
        print(f"[{qi + 1}/{len(questions)}] {q['category']:<20} " + " ".join(
            f"{label}={rows[label][-1]['tau']:.2f}" for label, _, _ in setups) +
            f"  ({time.perf_counter() - started:.0f} s)", flush=True)

    categories = sorted({r["category"] for r in rows["none"]})
    labels = [label for label, _, _ in setups]
    print("\nτ (tokens per decode call) per category")
    print(f"{'category':<20}" + "".join(f"{label:>12}" for label in labels))
    tau_table = {}
    for cat in categories + ["overall"]:
        line = f"{cat:<20}"
        for label in labels:
            sel = [r for r in rows[label] if cat == "overall" or r["category"] == cat]
            tau = 1 + sum(r["accepted"] for r in sel) / max(1, sum(r["calls"] for r in sel))
            tau_table.setdefault(label, {})[cat] = round(tau, 3)
            line += f"{tau:>12.3f}"
        print(line)
    speed = {}
    base_tps = sum(r["tokens"] - 1 for r in rows["none"]) / sum(r["decode_s"] for r in rows["none"])
    print(f"\n{'drafter':<12}{'tok/s':>8}{'vs none':>9}{'ms/call':>9}{'host ms/step':>14}")
    for label in labels:
        sel = rows[label]
        tps = sum(r["tokens"] - 1 for r in sel) / sum(r["decode_s"] for r in sel)
        calls = sum(r["calls"] for r in sel)
        graph_ms = 1000 * sum(r["decode_graph_s"] for r in sel) / max(1, calls)
        host_ms = 1000 * sum(r["decode_s"] - r["decode_graph_s"] for r in sel) / max(1, calls)
        speed[label] = {"tokens_per_s": round(tps, 2), "speedup": round(tps / base_tps, 3),
                        "graph_ms_per_call": round(graph_ms, 2), "host_ms_per_step": round(host_ms, 3)}
        print(f"{label:<12}{tps:>8.1f}{tps / base_tps:>8.2f}x{graph_ms:>9.1f}{host_ms:>14.2f}")
    total_tokens = sum(r["tokens"] for r in rows["none"])
    print(f"\nlossless: {len(mismatches)} mismatching outputs over {done} questions x "
          f"{len(labels) - 1} drafters ({total_tokens} reference tokens)")
    questions = questions[:done]
    for m in mismatches:
        print(f"  mismatch: {m}")
    print(json.dumps({"bundle": args.bundle, "questions": done, "max_new_tokens": args.max_new_tokens,
                      "settings": {label: getattr(d, "settings", {}) for label, d in drafters.items()},
                      "call_ms": cost, "tau": tau_table, "speed": speed,
                      "mismatches": mismatches, "reference_tokens": total_tokens}))
    return 0


if __name__ == "__main__":
    sys.exit(main())

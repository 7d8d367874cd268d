"""τ, speed and losslessness of the trained multi-token drafters vs the training-free ones, interleaved.

    python benchmarks/mtp_bench.py --adapter-bundle /tmp/mtp-bundle --masks-bundle /tmp/mtp-masks-bundle \
        --per-category 4 --max-new-tokens 128 --out benchmarks/results/mtp/bench.json

Two bundles of the same base weights: `--masks-bundle` has the plain base graphs plus learned masks trained
alone (rung 0: `train-mtp --rank 0 --no-sampler`); `--adapter-bundle` has the gated-LoRA graphs, masks and
sampler head. Every configuration answers every question in turn (the order rotates per question, so machine
noise hits all alike); each greedy output is compared token for token with `none` on the adapter bundle
(gate 0); speeds are relative to it, and the cost of one adapter-graph call vs one base-graph call is measured
first (interleaved) to relate it to plain decoding of the base graphs. Questions go round-robin over
categories, so a run cut short by --time-limit still covers every category.

Two cores: run two shards side by side (`--shard 0/2`, `--shard 1/2`, each one thread, each interleaving all
methods itself), then `--merge a.json b.json` sums their per-question rows into one report.
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

# the same question spread as the ESP benchmark: evenly over each category, then round-robin
from esp_bench import QUESTIONS, load_questions  # a sibling script (run as python benchmarks/mtp_bench.py)

from mtpedge.runtime.drafters import make_drafter
from mtpedge.runtime.engine import Engine
from mtpedge.runtime.generate import generate


def setups(args) -> list[tuple[str, str, str, dict]]:
    """(label, bundle key, drafter, options)."""
    return [
        ("none", "adapter", "none", {}),
        ("esp-mean", "masks", "esp", {"mask_init": "mean", "masks": 1}),
        ("esp-learned", "masks", "esp", {"mask_init": "learned", "masks": 1, "mask_update": 0.0}),
        ("lookup", "masks", "lookup", {}),
        ("hybrid", "masks", "hybrid", {}),
        ("mtp-linear", "adapter", "mtp", {"mtp_layout": "linear"}),
        ("mtp-quadratic", "adapter", "mtp", {"mtp_layout": "quadratic"}),
        ("mtp-tree", "adapter", "mtp", {"mtp_layout": "tree"}),
        ("mtp-tree-lookup", "adapter", "mtp", {"mtp_layout": "tree", "lookup": True}),
    ]


# run only when named in --only: ESP's tree over the adapter's LoRA-trained masks (gate 1 at the mask slots)
EXTRA = [("esp-lora", "adapter", "esp", {"mask_init": "learned", "masks": 1})]


def summarise(rows: dict[str, list[dict]], labels: list[str]) -> tuple[dict, dict]:
    categories = sorted({r["category"] for r in rows["none"]})
    tau = {}
    for label in labels:
        for cat in categories + ["overall"]:
            sel = [r for r in rows[label] if cat == "overall" or r["category"] == cat]
            tau.setdefault(label, {})[cat] = round(1 + sum(r["accepted"] for r in sel) / max(1, sum(
                r["calls"] for r in sel)), 3)
    base = sum(r["tokens"] - 1 for r in rows["none"]) / sum(r["decode_s"] for r in rows["none"])
    speed = {}
    for label in labels:
        sel = rows[label]
        tps = sum(r["tokens"] - 1 for r in sel) / sum(r["decode_s"] for r in sel)
        calls = max(1, sum(r["calls"] for r in sel))
        speed[label] = {"tokens_per_s": round(tps, 2), "vs_none": round(tps / base, 3),
                        "graph_ms_per_call": round(1000 * sum(r["graph_s"] for r in sel) / calls, 2),
                        "host_ms_per_step": round(1000 * sum(r["decode_s"] - r["graph_s"] for r in sel) / calls, 2)}
    return tau, speed


def report(rows: dict[str, list[dict]], labels: list[str], mismatches: list[dict], done: int) -> dict:
    """Print τ per category, speeds and the lossless count; return them."""
    tau, speed = summarise(rows, labels)
    print("\nτ (tokens per decode call)")
    print(f"{'category':<16}" + "".join(f"{label:>16}" for label in labels))
    for cat in tau["none"]:
        print(f"{cat:<16}" + "".join(f"{tau[label][cat]:>16.3f}" for label in labels))
    print(f"\n{'method':<16}{'tok/s':>8}{'vs none':>14}{'graph ms/call':>15}{'host ms/step':>14}")
    for label in labels:
        s = speed[label]
        print(f"{label:<16}{s['tokens_per_s']:>8.2f}{s['vs_none']:>13.2f}x{s['graph_ms_per_call']:>15.1f}"
              f"{s['host_ms_per_step']:>14.2f}")
    reference = sum(r["tokens"] for r in rows["none"])
    print(f"\nlossless: {len(mismatches)} mismatching outputs over {done} questions x {len(labels) - 1} methods "
          f"({reference} reference tokens)")
    return {"questions": done, "tau": tau, "speed": speed, "mismatches": mismatches, "reference_tokens": reference}


def merge(files: list[str], out: str | None) -> int:
    """One report from shard results (their rows summed; call costs and settings kept per shard)."""
    shards = [json.loads(Path(f).read_text()) for f in files]
    labels = list(shards[0]["rows"])
    if any(list(s["rows"]) != labels for s in shards):
        raise SystemExit("the shards ran different methods: merge only shards of one command")
    rows = {label: [r for s in shards for r in s["rows"][label]] for label in labels}
    mismatches = [m for s in shards for m in s["mismatches"]]
    result = report(rows, labels, mismatches, sum(s["questions"] for s in shards))
    result.update({"merged": files, "call_ms": [s["call_ms"] for s in shards], "settings": shards[0]["settings"],
                   "adapter": shards[0]["adapter"], "max_new_tokens": shards[0]["max_new_tokens"], "rows": rows})
    if out:
        Path(out).write_text(json.dumps(result, indent=1))
    return 0


def call_cost(engines: dict[str, Engine], widths: tuple[int, ...], reps: int) -> dict:
    """Median ms of one decode-width call per bundle, interleaved (gate 0 on the adapter graphs)."""
    times = {(key, w): [] for key in engines for w in widths}
    for engine in engines.values():
        engine.reset()
        engine.prefill(list(range(100, 100 + min(300, engine.context // 2))))
    for _ in range(reps):
        for key, engine in engines.items():
            for w in widths:
                started = time.perf_counter()
                engine.run_block(engine.embed(np.arange(w) + 50), np.arange(-1, w - 1))
                times[(key, w)].append(1000 * (time.perf_counter() - started))
    return {f"{key}_w{w}": round(statistics.median(t), 2) for (key, w), t in times.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--adapter-bundle")
    parser.add_argument("--masks-bundle")
    parser.add_argument("--questions", default=str(QUESTIONS))
    parser.add_argument("--per-category", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--time-limit", type=float, default=None, help="seconds; stop after the current question")
    parser.add_argument("--out", default=None, help="write the JSON result here")
    parser.add_argument("--cost-reps", type=int, default=10)
    parser.add_argument("--only", default=None,
                        help="comma-separated labels (none always runs), e.g. esp-lora,mtp-quadratic")
    parser.add_argument("--shard", default=None, help="I/N: only every N-th question, starting at the I-th")
    parser.add_argument("--merge", nargs="+", default=None, help="shard result files to report as one run")
    args = parser.parse_args()
    if args.merge:
        return merge(args.merge, args.out)
    if not (args.adapter_bundle and args.masks_bundle):
        parser.error("--adapter-bundle and --masks-bundle are required (unless --merge)")

    engines = {"adapter": Engine.load(args.adapter_bundle, threads=args.threads),
               "masks": Engine.load(args.masks_bundle, threads=args.threads)}
    cost = call_cost(engines, (1, 16), args.cost_reps)
    print("call ms (median, interleaved): " + ", ".join(f"{k} {v}" for k, v in cost.items()), flush=True)
    plan = setups(args)
    if args.only:
        wanted = ["none", *[label for label in args.only.split(",") if label != "none"]]
        known = {label: entry for label, *entry in plan + EXTRA}
        unknown = [label for label in wanted if label not in known]
        if unknown:
            raise SystemExit(f"unknown --only labels {unknown}: choose from {', '.join(known)}")
        plan = [(label, *known[label]) for label in wanted]
    labels = [label for label, *_ in plan]
    drafters = {label: make_drafter(name, engines[key], **opts) for label, key, name, opts in plan}
    questions = load_questions(Path(args.questions), args.per_category)
    if args.shard:
        index, count = (int(x) for x in args.shard.split("/"))
        questions = questions[index::count]
    tok = engines["adapter"].tokenizer
    rows: dict[str, list[dict]] = defaultdict(list)
    mismatches: list[dict] = []
    started, done = time.perf_counter(), 0
    for qi, q in enumerate(questions):
        if args.time_limit and time.perf_counter() - started > args.time_limit:
            print(f"time limit reached after {qi} of {len(questions)} questions", flush=True)
            break
        prompt = tok.encode_chat([{"role": "user", "content": q["turns"][0]}])
        if len(prompt) + args.max_new_tokens > engines["adapter"].context:
            print(f"skipped {q['question_id']}: {len(prompt)} prompt tokens do not fit the context", flush=True)
            continue
        done += 1
        shift = qi % len(plan)
        outputs = {}
        for label, key, _, _ in plan[shift:] + plan[:shift]:
            result = generate(engines[key], prompt, args.max_new_tokens, drafter=drafters[label])
            s = result.stats
            outputs[label] = result.token_ids
            rows[label].append({"category": q["category"], "tokens": s.new_tokens, "calls": s.decode_calls,
                                "accepted": sum(k * v for k, v in s.accepted_histogram.items()),
                                "decode_s": s.decode_seconds, "graph_s": s.graph_seconds - s.prefill_seconds})
        for label in labels:
            if outputs[label] != outputs["none"]:
                a, b = outputs[label], outputs["none"]
                first = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
                mismatches.append({"question": q["question_id"], "drafter": label, "index": first})
        last = {label: rows[label][-1] for label in labels}
        print(f"[{qi + 1}/{len(questions)}] {q['category']:<16} " + " ".join(
            f"{label}={1 + last[label]['accepted'] / max(1, last[label]['calls']):.2f}" for label in labels)
            + f"  ({time.perf_counter() - started:.0f} s)", flush=True)

    result = report(rows, labels, mismatches, done)
    result.update({"adapter_bundle": args.adapter_bundle, "masks_bundle": args.masks_bundle,
                   "max_new_tokens": args.max_new_tokens, "threads": args.threads, "shard": args.shard,
                   "settings": {label: getattr(d, "settings", {"drafter": "none"}) for label, d in drafters.items()},
                   "adapter": engines["adapter"].manifest.extras.get("mtp"),
                   "masks_adapter": engines["masks"].manifest.extras.get("mtp"), "call_ms": cost,
                   "rows": rows})
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

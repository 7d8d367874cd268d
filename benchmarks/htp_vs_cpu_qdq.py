"""Greedy tokens on the HTP simulator vs the CPU QDQ graph, and where (and at what margin) they part.

    python benchmarks/htp_vs_cpu_qdq.py QDQ_BUNDLE QNN_BUNDLE [--prompts 8] [--tokens 32] [--out FILE.json]

QDQ_BUNDLE runs on onnxruntime's CPU EP (its QDQ emulation); QNN_BUNDLE is the same bundle compiled by
`mtpedge compile-qnn` (context binaries), run on the QNN EP's HTP simulator with CPU fallback disabled.
For each prompt: the first step where the greedy tokens differ, and at that step the CPU graph's margin
between its top-2 logits (a small margin = a near-tie that fixed-point arithmetic may flip). The HTP run is
fed the CPU's tokens (teacher forcing), so the first difference is where free-running greedy decoding would
part, and the top-1 agreement over all steps is measured too.
The two runs happen one after the other in separate processes' worth of sessions (the simulator misbehaves
with many HTP sessions alive), so only one engine is loaded at a time.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time

import numpy as np

from mtpedge.runtime.engine import Engine

PROMPTS = (
    "Why is the sky blue?",
    "Write a haiku about autumn leaves.",
    "What is the capital of France, and why is it famous?",
    "Give me three tips for learning to code.",
    "Explain what a prime number is.",
    "How do plants make their food?",
    "What should I pack for a weekend camping trip?",
    "Describe the water cycle in two sentences.",
)


def greedy_with_logits(engine: Engine, prompt_ids: list[int], tokens: int,
                       forced: list[int] | None = None) -> tuple[list[int], list[np.ndarray]]:
    """Greedy decoding, one width-1 call per token, keeping every step's logits and argmax.

    With `forced`, those tokens are fed instead of the argmax (teacher forcing): the argmax is still
    recorded, so a run forced with another engine's tokens gives top-1 agreement at every step, not only
    up to the first difference.
    """
    engine.reset()
    logits = engine.prefill(prompt_ids)
    out_ids, all_logits = [], []
    for step_index in range(tokens):
        all_logits.append(logits)
        out_ids.append(int(np.argmax(logits)))
        token = out_ids[-1] if forced is None else forced[step_index]
        step = engine.run_block(engine.embed(np.array([token])), np.array([-1]))
        engine.cache.commit_accepted_kv(step.new_keys, step.new_values, np.arange(1))
        logits = step.logits[0]
    return out_ids, all_logits


def run_all(folder: str, providers: list[str] | None, prompts: list[list[int]], tokens: int,
            forced: list[list[int]] | None = None) -> list[tuple]:
    engine = Engine.load(folder, threads=1, providers=providers)
    results = []
    for i, ids in enumerate(prompts):
        start = time.perf_counter()
        results.append(greedy_with_logits(engine, ids, tokens, None if forced is None else forced[i]))
        print(f"  prompt {i + 1}/{len(prompts)}: {time.perf_counter() - start:.1f} s", file=sys.stderr, flush=True)
    del engine
    gc.collect()
    return results


def top2_margin(logits: np.ndarray) -> float:
    top = np.sort(logits)[-2:]
    return float(top[1] - top[0])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("qdq_bundle")
    parser.add_argument("qnn_bundle")
    parser.add_argument("--prompts", type=int, default=len(PROMPTS))
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--out", help="JSON file for the per-prompt results")
    args = parser.parse_args(argv)
    tokenizer = Engine.load(args.qdq_bundle, threads=1).tokenizer
    prompts = [tokenizer.encode_chat([{"role": "user", "content": p}]) for p in PROMPTS[: args.prompts]]
    print(f"CPU QDQ: {len(prompts)} prompts x {args.tokens} tokens", file=sys.stderr)
    cpu = run_all(args.qdq_bundle, None, prompts, args.tokens)
    print("HTP simulator (QNN EP, CPU fallback disabled)", file=sys.stderr)
    htp = run_all(args.qnn_bundle, ["QNNExecutionProvider"], prompts, args.tokens,
                  forced=[ids for ids, _ in cpu])
    rows = []
    for text, (cpu_ids, cpu_logits), (htp_ids, htp_logits) in zip(PROMPTS, cpu, htp, strict=False):
        differ = [i for i, (a, b) in enumerate(zip(cpu_ids, htp_ids, strict=True)) if a != b]
        first = differ[0] if differ else None
        row = {"prompt": text, "equal_tokens": args.tokens if first is None else first, "first_difference": first,
               "top1_agreement_teacher_forced": round(1 - len(differ) / args.tokens, 4)}
        if first is not None:
            row.update(cpu_token=cpu_ids[first], htp_token=htp_ids[first],
                       cpu_top2_margin=round(top2_margin(cpu_logits[first]), 4),
                       htp_top2_margin=round(top2_margin(htp_logits[first]), 4),
                       cpu_margin_median_before=round(float(np.median(
                           [top2_margin(x) for x in cpu_logits[:first]])) if first else float("nan"), 4))
        rows.append(row)
        print(json.dumps(row))
    same = sum(r["first_difference"] is None for r in rows)
    print(f"{same}/{len(rows)} prompts give the same {args.tokens} greedy tokens on the HTP simulator and on CPU",
          file=sys.stderr)
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"tokens": args.tokens, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

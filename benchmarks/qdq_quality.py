"""A quantized bundle's answers against float32: top-1 agreement and perplexity, held text and Spec-Bench.

    python benchmarks/qdq_quality.py FLOAT_BUNDLE QUANT_BUNDLE [--device cpu|qnn] [--per-category 1]
        [--answer-tokens 48] [--tau] [--tau-tokens 64] [--out FILE.json]

Two sets, both teacher-forced through the widest graph (export/quality.py's sequence_logits):
  held       export/quality.py's HELD_TEXT (written for the project, in no training set we know of)
  spec       the first Spec-Bench question of each category (first turn, chat template, at most 600
             characters) followed by float32's own greedy answer (`--answer-tokens`): the model's real
             prompts and its own continuations; Spec-Bench is used for measurement only, never calibration.
top-1 agreement is over every position; perplexity is that of the bundle's next-token predictions over the
same tokens. With --tau, the default drafter (runtime.drafters.DEFAULT_DRAFTER; no cost table, so its trees
fill their width) decodes every spec prompt greedily on both bundles (`--tau-tokens` each) and τ = tokens per
decode call is compared.

--device qnn runs QUANT_BUNDLE (a `compile-qnn --no-share-weights` bundle) on the HTP simulator, CPU
fallback disabled: seconds a call there, so the run takes tens of minutes.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from mtpedge.bench.questions import SPEC_BENCH, load_questions  # noqa: E402
from mtpedge.bench.report import emit_result  # noqa: E402
from mtpedge.export.quality import HELD_TEXT, perplexity, sequence_logits  # noqa: E402
from mtpedge.runtime.drafters import DEFAULT_DRAFTER, make_drafter  # noqa: E402
from mtpedge.runtime.engine import Engine  # noqa: E402
from mtpedge.runtime.generate import accepted_drafts, generate  # noqa: E402
from mtpedge.runtime.qnn import QNN_EP  # noqa: E402


def spec_prompts(per_category: int, max_chars: int = 600) -> list[str]:
    return [q.turns[0] for q in load_questions(SPEC_BENCH, limit=per_category, max_chars=max_chars)]


def compare(ref: np.ndarray, quant: np.ndarray, ids: list[int]) -> dict:
    return {"tokens": len(ids), "agree": int((ref.argmax(-1) == quant.argmax(-1)).sum()),
            "nll_f32": float(np.log(perplexity(ref, ids))) * (len(ids) - 1),
            "nll_quant": float(np.log(perplexity(quant, ids))) * (len(ids) - 1)}


def summary(parts: list[dict]) -> dict:
    tokens, agree = sum(p["tokens"] for p in parts), sum(p["agree"] for p in parts)
    predicted = sum(p["tokens"] - 1 for p in parts)
    ppl_f, ppl_q = (float(np.exp(sum(p[k] for p in parts) / predicted)) for k in ("nll_f32", "nll_quant"))
    return {"top1": round(agree / tokens, 4), "perplexity_f32": round(ppl_f, 3), "perplexity": round(ppl_q, 3),
            "perplexity_change": round(ppl_q / ppl_f - 1, 4), "tokens": tokens}


def tau(engine: Engine, prompts: list[list[int]], tokens: int) -> float:
    calls = accepted = 0
    for ids in prompts:
        stats = generate(engine, ids, tokens, stop_token_ids=set(), on_overflow="stop",
                         drafter=make_drafter(DEFAULT_DRAFTER, engine)).stats
        calls += stats.decode_calls
        accepted += accepted_drafts(stats.accepted_histogram)
    return round(1 + accepted / max(1, calls), 4)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("float_bundle")
    parser.add_argument("quant_bundle")
    parser.add_argument("--device", choices=["cpu", "qnn"], default="cpu")
    parser.add_argument("--per-category", type=int, default=1)
    parser.add_argument("--answer-tokens", type=int, default=48)
    parser.add_argument("--tau", action="store_true", help=f"also τ of {DEFAULT_DRAFTER} on both bundles")
    parser.add_argument("--tau-tokens", type=int, default=64)
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    ref = Engine.load(args.float_bundle)
    held = ref.tokenizer.encode(HELD_TEXT)[:ref.context]
    prompts = [ref.tokenizer.encode_chat([{"role": "user", "content": p}])[:ref.context // 2]
               for p in spec_prompts(args.per_category)]
    seqs = [ids + generate(ref, ids, args.answer_tokens, stop_token_ids=set(), on_overflow="stop").token_ids
            for ids in prompts]
    ref_held, ref_seqs = sequence_logits(ref, held), [sequence_logits(ref, s) for s in seqs]
    report: dict = {"float_bundle": args.float_bundle, "quant_bundle": args.quant_bundle, "device": args.device,
                    "spec_prompts": len(seqs), "answer_tokens": args.answer_tokens}
    if args.tau:
        report["tau_f32"] = tau(ref, prompts, args.tau_tokens)
    del ref
    gc.collect()
    quant = Engine.load(args.quant_bundle, threads=1 if args.device == "qnn" else None,
                        providers=[QNN_EP] if args.device == "qnn" else None)
    report["held"] = summary([compare(ref_held, sequence_logits(quant, held), held)])
    print(f"held: {report['held']}", file=sys.stderr, flush=True)
    parts = []
    for i, (seq, ref_logits) in enumerate(zip(seqs, ref_seqs, strict=True)):
        parts.append(compare(ref_logits, sequence_logits(quant, seq), seq))
        print(f"  spec {i + 1}/{len(seqs)}: top-1 {parts[-1]['agree']}/{parts[-1]['tokens']}", file=sys.stderr,
              flush=True)
    report["spec"] = summary(parts)
    if args.tau:
        report["tau"] = tau(quant, prompts, args.tau_tokens)
        report["tau_change"] = round(report["tau"] / report["tau_f32"] - 1, 4)
    report["load_average"] = os.getloadavg()[0]
    report["seconds"] = round(time.perf_counter() - started, 1)
    emit_result(report, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())

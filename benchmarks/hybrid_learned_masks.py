"""Hybrid drafting with learned mask embeddings (rung 0 of issue 6) vs the training-free vocab-mean masks.

    python benchmarks/hybrid_learned_masks.py MASKS_BUNDLE [--questions-per-category 1] [--max-new-tokens 128]

MASKS_BUNDLE: a bundle exported with `--mtp-adapter` from `train-mtp --rank 0 --no-sampler` (learned masks alone).
Every configuration answers every question (first turn, chat template, greedy) in one process; each output is
compared token for token with plain decoding. τ here = new tokens / decode calls (the prefill's token excluded
from neither), cumulative over the questions so far.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mtpedge.runtime.drafters import make_drafter  # noqa: E402
from mtpedge.runtime.engine import Engine  # noqa: E402
from mtpedge.runtime.generate import generate  # noqa: E402
from tests.spec_bench import questions  # noqa: E402

CONFIGS = {
    "none": None,
    "hybrid-mean": {"mask_init": "mean"},
    "hybrid-learned": {"mask_init": "learned", "mask_update": 0.0},
    "hybrid-learned-k2": {"mask_init": "learned", "mask_update": 0.0, "masks": 2},
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bundle")
    parser.add_argument("--questions-per-category", type=int, default=1)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    args = parser.parse_args()
    engine = Engine.load(args.bundle, threads=1)
    totals = {name: [0, 0] for name in CONFIGS}
    mismatches = 0
    for question in questions(args.questions_per_category):
        ids = engine.tokenizer.encode_chat([{"role": "user", "content": question["turns"][0]}])
        reference = None
        for name, options in CONFIGS.items():
            drafter = None if options is None else make_drafter("hybrid", engine, **options)
            result = generate(engine, ids, args.max_new_tokens, drafter=drafter, on_overflow="stop")
            if reference is None:
                reference = result.token_ids
            elif result.token_ids != reference:
                mismatches += 1
            totals[name][0] += result.stats.new_tokens
            totals[name][1] += result.stats.decode_calls
        taus = {name: round(tokens / max(calls, 1), 2) for name, (tokens, calls) in totals.items()}
        print(question["category"], taus, flush=True)
    print("outputs different from plain decoding:", mismatches)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""τ of several configurations of one drafter on a few Spec-Bench questions (exploration; 1 thread).

    python benchmarks/drafter_sweep.py --per-category 1 --offset 0.5 --config '{"width": 16}' --config '...'
    python benchmarks/drafter_sweep.py --drafter mtp --bundle ADAPTER_BUNDLE --config '{"mtp_layout": "tree"}'

Each --config is a JSON dict of `make_drafter(DRAFTER, ...)` options; for the hybrid, "masks_file" (a .npy of
learned mask embeddings, (k, hidden)) replaces the bundle's learned masks for that run. --offset picks questions between
the ones esp_bench.py uses (0.5: halfway between them), so that exploring does not tune on the final set.
Every output is compared with plain decoding (cached per question under --cache). Prints τ overall, per
category and the histogram of accepted drafts per call.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np

from mtpedge.bench.questions import SPEC_BENCH as QUESTIONS
from mtpedge.runtime.drafters import make_drafter
from mtpedge.runtime.engine import Engine
from mtpedge.runtime.generate import generate

DEFAULT_BUNDLE = Path.home() / ".cache/mtpedge/bundles/SmolLM2-135M-Instruct-cl1024"


def pick(per_category: int, offset: float) -> list[dict]:
    by_category: dict[str, list[dict]] = defaultdict(list)
    for line in QUESTIONS.read_text().splitlines():
        q = json.loads(line)
        by_category[q["category"]].append(q)
    out = []
    for i in range(per_category):
        for cat in sorted(by_category):
            items = by_category[cat]
            step = max(1, len(items) // per_category)
            index = i * step + int(offset * step)
            if index < len(items):
                out.append(items[index])
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bundle", default=str(DEFAULT_BUNDLE))
    parser.add_argument("--per-category", type=int, default=1)
    parser.add_argument("--offset", type=float, default=0.5)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--drafter", default="hybrid", help="the drafter whose options --config sets")
    parser.add_argument("--config", action="append", required=True)
    parser.add_argument("--cache", default="/tmp/hyb-exp/reference.json")
    args = parser.parse_args()
    engine = Engine.load(args.bundle, threads=1)
    cache_path = Path(args.cache)
    cache = json.loads(cache_path.read_text()) if cache_path.is_file() else {}
    questions = pick(args.per_category, args.offset)
    prompts, references = [], []
    for q in questions:
        ids = engine.tokenizer.encode_chat([{"role": "user", "content": q["turns"][0]}])
        key = f"{q['question_id']}:{args.max_new_tokens}"
        if key not in cache:
            cache[key] = generate(engine, ids, args.max_new_tokens).token_ids
            cache_path.write_text(json.dumps(cache))
        prompts.append(ids)
        references.append(cache[key])
    for text in args.config:
        options = json.loads(text)
        masks_file = options.pop("masks_file", None)
        drafter = make_drafter(args.drafter, engine, **options)
        if masks_file:
            drafter.probe.masks.learned = np.load(masks_file).astype(np.float32)
        per_cat: dict[str, list[int]] = defaultdict(lambda: [0, 0])
        histogram: Counter = Counter()
        mismatches = 0
        for q, ids, ref in zip(questions, prompts, references, strict=True):
            result = generate(engine, ids, args.max_new_tokens, drafter=drafter)
            s = result.stats
            mismatches += result.token_ids != ref
            per_cat[q["category"]][0] += sum(k * v for k, v in s.accepted_histogram.items())
            per_cat[q["category"]][1] += s.decode_calls
            histogram.update(s.accepted_histogram)
        accepted = sum(a for a, _ in per_cat.values())
        calls = sum(c for _, c in per_cat.values())
        cats = " ".join(f"{cat[:6]}={1 + a / c:.2f}" for cat, (a, c) in sorted(per_cat.items()))
        hist = " ".join(f"{k}:{histogram[k]}" for k in sorted(histogram))
        print(f"tau={1 + accepted / calls:.3f} calls={calls} mismatches={mismatches} {text}\n    {cats}\n    "
              f"hist {hist}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

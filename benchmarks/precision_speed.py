"""Plain greedy decoding of the float32 bundle vs the fast default bundle, interleaved prompt by prompt.

    python benchmarks/precision_speed.py FLOAT_BUNDLE FAST_BUNDLE [--prompts 6] [--max-new-tokens 96] [--threads 1]

Tuning prompts (questions 5-6 of each category, first turns). Prints mean decode tokens/s of each and the ratio;
the last line is one JSON document.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.lean_calls import tuning_questions  # noqa: E402
from mtpedge.runtime.engine import Engine  # noqa: E402
from mtpedge.runtime.generate import generate  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("float_bundle", type=Path)
    parser.add_argument("fast_bundle", type=Path)
    parser.add_argument("--prompts", type=int, default=6)
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    engines = {"float32": Engine.load(args.float_bundle, threads=args.threads),
               "fast": Engine.load(args.fast_bundle, threads=args.threads)}
    tok = engines["fast"].tokenizer
    prompts = [tok.encode_chat([{"role": "user", "content": q["turns"][0]}])
               for q in tuning_questions()[: args.prompts]]
    rates: dict[str, list[float]] = {name: [] for name in engines}
    load = [os.getloadavg()[0]]
    for i, prompt in enumerate(prompts):
        for name in (list(engines) if i % 2 == 0 else list(engines)[::-1]):
            rates[name].append(generate(engines[name], prompt, args.max_new_tokens).stats.tokens_per_second)
        load.append(os.getloadavg()[0])
    doc = {name: statistics.fmean(r) for name, r in rates.items()}
    doc.update(ratio=doc["fast"] / doc["float32"], threads=args.threads, prompts=len(prompts),
               max_new_tokens=args.max_new_tokens, load_average=[min(load), max(load)])
    print(f"plain decoding, {len(prompts)} prompts x {args.max_new_tokens} tokens, {args.threads} thread(s), load "
          f"{min(load):.1f}-{max(load):.1f}: float32 {doc['float32']:.1f} tok/s, fast {doc['fast']:.1f} tok/s, "
          f"x{doc['ratio']:.2f}")
    print(json.dumps(doc))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

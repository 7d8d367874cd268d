"""Does a drafted block get the logits plain decoding gets? Lossless verification rests on it: plain decoding runs
width-1 calls, a drafter's steps run wider ones.

    MTPEDGE_CACHE=... python benchmarks/width_invariance.py BUNDLE [--steps 60] [--threads 1] [--slots 4,16]
        [--device cpu|qnn]

Plain greedy decoding of one prompt, recording each step's logits; then the same steps again from the same caches:
  root rows   the root alone (width 1) against the root followed by dummy tokens (4 and 16 slots: the narrowest
              graphs that hold them); the root row sees only the cache and itself
  block rows  a 4-token block of the greedy continuation itself (what a fully accepted draft is): its rows 1-3
              against plain decoding's width-1 calls for those tokens, which see the earlier ones in the cache
  width 1     the width-1 call that commits each step, again from the same cache: is the backend deterministic?
Prints the largest logit difference, how many calls were bit-identical, and the steps where the argmax differs
(with plain decoding's top-2 gap there). --device qnn runs a `compile-qnn --no-share-weights` bundle on the QNN EP
(the HTP simulator on x86, CPU fallback disabled; seconds to minutes a call: a few steps, `--slots 16`).
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from mtpedge.runtime.engine import Engine
from mtpedge.runtime.qnn import QNN_EP

PROMPT = "Write a short story about a lighthouse keeper who finds a message in a bottle."
BLOCK = 4


def plain_decoding(engine: Engine, prompt: list[int], steps: int) -> tuple[list[int], list[np.ndarray]]:
    tokens, logits = [int(np.argmax(engine.prefill(prompt)))], []
    for _ in range(steps):
        one = engine.run_block(engine.embed(np.array(tokens[-1:])), np.array([-1]))
        engine.cache.commit_accepted_kv(one.new_keys, one.new_values, np.arange(1))
        logits.append(one.logits[0])
        tokens.append(int(np.argmax(one.logits[0])))
    return tokens, logits


def report(name: str, values: list[float], threads: int) -> None:
    print(f"{name} ({threads} threads): max |logit diff| vs plain decoding: median {np.median(values):.2e}, max "
          f"{max(values):.2e}; bit-identical in {sum(v == 0 for v in values)} of {len(values)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bundle")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--slots", default="4,16", help="comma-separated root-row block sizes (default 4,16)")
    parser.add_argument("--device", choices=["cpu", "qnn"], default="cpu")
    args = parser.parse_args()
    engine = Engine.load(args.bundle, threads=args.threads, providers=[QNN_EP] if args.device == "qnn" else None)
    prompt = engine.tokenizer.encode_chat([{"role": "user", "content": PROMPT}])
    tokens, plain = plain_decoding(engine, prompt, args.steps + BLOCK)
    engine.reset()
    engine.prefill(prompt)
    slots = [int(w) for w in args.slots.split(",")]
    roots: dict[int, list[float]] = {w: [] for w in slots if w <= engine.graphs.max_width}
    block_rows: list[float] = []
    again: list[float] = []
    flips = []
    for step in range(args.steps):
        for width, diffs in roots.items():
            chain = np.array([tokens[step], *range(100, 100 + width - 1)])  # the root row sees only the root
            wide = engine.run_block(engine.embed(chain), np.arange(-1, chain.size - 1)).logits[0]
            diffs.append(float(np.abs(wide - plain[step]).max()))
            if int(np.argmax(wide)) != tokens[step + 1]:
                flips.append(("root", step, width))
        block = engine.run_block(engine.embed(np.array(tokens[step:step + BLOCK])), np.arange(-1, BLOCK - 1))
        block_rows.append(max(float(np.abs(block.logits[j] - plain[step + j]).max()) for j in range(1, BLOCK)))
        for j in range(1, BLOCK):
            if int(np.argmax(block.logits[j])) != tokens[step + j + 1]:
                gap = np.sort(plain[step + j])[-2:]
                flips.append(("block row", step, j, round(float(gap[1] - gap[0]), 4)))
        one = engine.run_block(engine.embed(np.array(tokens[step:step + 1])), np.array([-1]))
        again.append(float(np.abs(one.logits[0] - plain[step]).max()))
        engine.cache.commit_accepted_kv(one.new_keys, one.new_values, np.arange(1))
        print(f"  step {step}: root rows {[round(d[-1], 6) for d in roots.values()]}, block rows "
              f"{block_rows[-1]:.2e}, width 1 again {again[-1]:.2e}", file=sys.stderr, flush=True)
    for width, diffs in roots.items():
        report(f"root row, graph for {width} slots", diffs, args.threads)
    report(f"rows 1-{BLOCK - 1} of a {BLOCK}-token block of the greedy continuation", block_rows, args.threads)
    report("the width-1 call again", again, args.threads)
    print(f"argmax differs from plain decoding at {len(flips)} rows: {flips}")


if __name__ == "__main__":
    main()

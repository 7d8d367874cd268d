"""Does a wider decode graph give a block's root row the logits the width-1 graph gives? Lossless verification rests
on it: plain decoding runs width-1 calls, a drafter's steps run wider ones.

    MTPEDGE_CACHE=... python benchmarks/width_invariance.py BUNDLE [--steps 60] [--device cpu|qnn] [--slots 4,16]

Plain greedy decoding of one prompt; at each step the root alone (width 1) and the root followed by a chain of
dummy tokens (4 and 16 slots: the narrowest graphs that hold them) run from the same cache. Prints the largest
logit difference of the root row and the steps where the argmax differs, with the width-1 call's top-2 gap there.
--device qnn runs a `compile-qnn --no-share-weights` bundle on the QNN EP (the HTP simulator on x86, CPU fallback
disabled; seconds a call, so a few steps and one slot count).
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from mtpedge.runtime.engine import Engine
from mtpedge.runtime.qnn import QNN_EP

PROMPT = "Write a short story about a lighthouse keeper who finds a message in a bottle."


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bundle")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--device", choices=["cpu", "qnn"], default="cpu")
    parser.add_argument("--slots", default="4,16", help="comma-separated block sizes compared with width 1")
    args = parser.parse_args()
    engine = Engine.load(args.bundle, threads=1, providers=[QNN_EP] if args.device == "qnn" else None)
    root = int(np.argmax(engine.prefill(engine.tokenizer.encode_chat([{"role": "user", "content": PROMPT}]))))
    diffs: dict[int, list[float]] = {int(n): [] for n in args.slots.split(",")}
    flips = []
    for step in range(args.steps):
        one = engine.run_block(engine.embed(np.array([root])), np.array([-1]))
        for width in diffs:
            if width > engine.graphs.max_width:
                continue
            chain = np.array([root, *range(100, 100 + width - 1)])  # the root row sees only the root and the cache
            wide = engine.run_block(engine.embed(chain), np.arange(-1, chain.size - 1))
            diffs[width].append(float(np.abs(wide.logits[0] - one.logits[0]).max()))
            if int(np.argmax(wide.logits[0])) != int(np.argmax(one.logits[0])):
                top2 = np.sort(one.logits[0])[-2:]
                flips.append((step, width, round(float(top2[1] - top2[0]), 4)))
            same = int(np.argmax(wide.logits[0])) == int(np.argmax(one.logits[0]))
            print(f"  step {step}: {width} slots, root-row max |logit diff| {diffs[width][-1]:.2e}, argmax "
                  f"{'same' if same else 'differs'} ({one.seconds:.2f} s width 1, {wide.seconds:.2f} s wide)",
                  file=sys.stderr, flush=True)
        engine.cache.commit_accepted_kv(one.new_keys, one.new_values, np.arange(1))
        root = int(np.argmax(one.logits[0]))
    for width, values in diffs.items():
        if values:
            print(f"graph for {width} slots: root-row max |logit diff| vs width 1: median {np.median(values):.2e}, "
                  f"max {max(values):.2e}")
    print(f"argmax differs at {len(flips)} of {sum(map(len, diffs.values()))} calls (step, slots, width-1 top-2 gap): "
          f"{flips}")


if __name__ == "__main__":
    main()

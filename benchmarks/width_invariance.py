"""Does a wider decode graph give a block's root row the logits the width-1 graph gives? Lossless verification rests
on it: plain decoding runs width-1 calls, a drafter's steps run wider ones.

    MTPEDGE_CACHE=... python benchmarks/width_invariance.py BUNDLE [--steps 60] [--threads 1]

Plain greedy decoding of one prompt; at each step the root alone (width 1) and the root followed by a chain of
dummy tokens (4 and 16 slots: the narrowest graphs that hold them) run from the same cache. Prints the largest
logit difference of the root row, how many calls gave it bit for bit, and the steps where the argmax differs, with
the width-1 call's top-2 gap there.
"""

from __future__ import annotations

import argparse

import numpy as np

from mtpedge.runtime.engine import Engine

PROMPT = "Write a short story about a lighthouse keeper who finds a message in a bottle."


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bundle")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    engine = Engine.load(args.bundle, threads=args.threads)
    root = int(np.argmax(engine.prefill(engine.tokenizer.encode_chat([{"role": "user", "content": PROMPT}]))))
    diffs: dict[int, list[float]] = {4: [], 16: []}
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
        engine.cache.commit_accepted_kv(one.new_keys, one.new_values, np.arange(1))
        root = int(np.argmax(one.logits[0]))
    for width, values in diffs.items():
        if values:
            print(f"graph for {width} slots ({args.threads} threads): root-row max |logit diff| vs width 1: median "
                  f"{np.median(values):.2e}, max {max(values):.2e}; bit-identical in "
                  f"{sum(v == 0 for v in values)} of {len(values)} calls")
    print(f"argmax differs at {len(flips)} of {sum(map(len, diffs.values()))} calls (step, slots, width-1 top-2 gap): "
          f"{flips}")


if __name__ == "__main__":
    main()

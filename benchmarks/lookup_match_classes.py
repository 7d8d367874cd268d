"""How often lookup's drafts are accepted, per match class (n-gram length matched, previous step accepted a draft).

    python benchmarks/lookup_match_classes.py runs/heldout-128.npz [--length 7]

Replays greedy chain drafting over held-out answers (the base model's own greedy answers: the tokens lossless
decoding outputs; the file `benchmarks/mtp_heldout.py --heldout` makes), newest n-gram match (3 down to 1) over
prompt + answer so far, and prints per class the number of first drafts tried and the acceptance rate at each
depth given the parent was accepted. Why lookup keeps its rates per class: benchmarks/results/fast/README.md
section 24.
"""

from __future__ import annotations

import argparse

import numpy as np

from mtpedge.models.mtp_eval import HeldOut
from mtpedge.runtime.ngram import ngram_match


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("heldout", help="held-out answers (.npz of benchmarks/mtp_heldout.py)")
    parser.add_argument("--length", type=int, default=7, help="draft tokens per step")
    args = parser.parse_args()
    held = HeldOut.load(args.heldout)
    tries: dict[tuple[int, bool], np.ndarray] = {}
    hits: dict[tuple[int, bool], np.ndarray] = {}
    for prompt, answer in zip(held.prompts, held.answers, strict=True):
        answer = answer[: held.budget]
        i, streak = 0, False
        while i < answer.size:
            n, found = ngram_match(np.concatenate([prompt, answer[:i]]), 3, 1, args.length, 1)
            accepted = 0
            if found:
                draft, target = found[0], answer[i: i + found[0].size]
                while accepted < min(draft.size, target.size) and draft[accepted] == target[accepted]:
                    accepted += 1
                key = (n, streak)
                tries.setdefault(key, np.zeros(args.length))[: min(accepted + 1, draft.size)] += 1
                hits.setdefault(key, np.zeros(args.length))[:accepted] += 1
            streak = accepted > 0
            i += accepted + 1
    print(f"{len(held.answers)} answers x {held.budget} tokens; rate at depth d = accepted / tried (parent accepted)")
    for key in sorted(tries):
        rates = " ".join(f"{h / t:.2f}" if t else "-" for h, t in zip(hits[key], tries[key], strict=True))
        print(f"n {key[0]}, previous step accepted {str(key[1]):5s}: {int(tries[key][0]):4d} first drafts; {rates}")


if __name__ == "__main__":
    main()

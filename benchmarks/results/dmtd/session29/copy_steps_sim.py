"""What a dmtd-spec copy step could verify beyond the copy's draft, scored against the output (lossless: the truth).

    python benchmarks/results/dmtd/session29/copy_steps_sim.py DMTD_BUNDLE [per_category=3]

Runs dmtd-spec (draft_len 1, lookup on) on Spec-Bench tuning questions (the 5th-7th of each category, none of the
52 report ones), records every copy step's first-draft distribution, then prints: how often the copy's best /
second / third first token was right, how right its probability is (calibration), and how far the lookup chain of
the context and a right draft continues to match.
"""

from __future__ import annotations

import json
import sys

import numpy as np

from mtpedge.bench.questions import SPEC_BENCH
from mtpedge.runtime.drafters import make_drafter
from mtpedge.runtime.drafters.lookup import NgramSource, static_table
from mtpedge.runtime.engine import Engine
from mtpedge.runtime.generate import generate


def record_copy_steps(engine: Engine, prompt: list[int]) -> tuple[list[int], list[tuple[int, np.ndarray]]]:
    """The answer, and per copy step (context length, the copy's first-draft probabilities over the shortlist)."""
    drafter = make_drafter("dmtd-spec", engine)
    steps: list[tuple[int, np.ndarray]] = []
    run, propose = drafter.run, drafter.propose
    context_len = [-1]  # the prompt's refill comes first: not a step

    def spy_run(copy: Engine, rows: np.ndarray):
        out = run(copy, rows)
        if copy is drafter.decode:  # the last decode call of a step before its chain is the draft call
            logits = out.logits[-1].astype(np.float64)
            probs = np.exp(logits - logits.max())
            steps.append((context_len[0], probs / probs.sum()))
        return out

    def spy_propose(context_ids, root, lead=0):
        context_len[0] = len(context_ids)
        return propose(context_ids, root, lead)

    drafter.run, drafter.propose = spy_run, spy_propose
    answer = generate(engine, prompt, max_new_tokens=128, drafter=drafter).token_ids
    # keep each step's last decode call (refills of piled-up heads come first)
    last = {at: probs for at, probs in steps if at >= 0}
    return answer, sorted(last.items())


def main() -> None:
    engine = Engine.load(sys.argv[1], threads=1)
    per_category = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    shortlist = make_drafter("dmtd-spec", engine).shortlist
    source = NgramSource(3, 1, 6, 1, static_table("auto", engine))
    by_category: dict[str, list[dict]] = {}
    for line in SPEC_BENCH.read_text().splitlines():
        question = json.loads(line)
        by_category.setdefault(question["category"], []).append(question)
    best_p, rank, matched, chained = [], [], [], []
    for questions in by_category.values():
        for question in questions[4:4 + per_category]:
            prompt = engine.tokenizer.encode_chat([{"role": "user", "content": question["turns"][0]}])
            if len(prompt) > 800:
                continue
            answer, steps = record_copy_steps(engine, prompt)
            full = prompt + answer
            for at, probs in steps:
                if at >= len(full):
                    continue
                top = shortlist[np.argsort(-probs)[:3]]
                truth = full[at:at + 8]
                rank.append(int(np.flatnonzero(top == truth[0])[0]) if truth[0] in top else -1)
                best_p.append(float(probs.max()))
                _, found = source.candidates(full[:at] + [int(top[0])])
                chain = found[0] if found else np.zeros(0, dtype=np.int64)
                chained.append(chain.size > 0)
                depth = min(chain.size, len(truth) - 1)
                run = np.cumprod(chain[:depth] == np.asarray(truth[1:1 + depth]))
                matched.append(int(run.sum()) if rank[-1] == 0 else 0)
    rank, best_p, matched, chained = map(np.asarray, (rank, best_p, matched, chained))
    print(f"{rank.size} copy steps: the copy's first token right {np.mean(rank == 0):.3f}, its 2nd choice "
          f"{np.mean(rank == 1):.3f}, its 3rd {np.mean(rank == 2):.3f}")
    for low, high in [(0, 0.1), (0.1, 0.2), (0.2, 0.3), (0.3, 0.5), (0.5, 0.7), (0.7, 1.01)]:
        sel = (best_p >= low) & (best_p < high)
        if sel.any():
            right = np.mean(rank[sel] == 0)
            print(f"  copy probability {low:.1f}-{min(high, 1):.1f}: {sel.sum()} steps, right {right:.2f}")
    right = (rank == 0) & chained
    depths = [np.mean(matched[right] >= d) for d in (1, 2, 3)]
    print(f"right drafts with a continuing lookup chain: {right.sum()} of {np.sum(rank == 0)}; its tokens 1/2/3 right: "
          f"{depths[0]:.2f} / {depths[1]:.2f} / {depths[2]:.2f} (conditional: {depths[0]:.2f}, "
          f"{depths[1] / max(depths[0], 1e-9):.2f}, {depths[2] / max(depths[1], 1e-9):.2f})")


if __name__ == "__main__":
    main()

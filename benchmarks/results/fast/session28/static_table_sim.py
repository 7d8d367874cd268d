"""Offline: how often a static n-gram table's chains would be accepted, beside prompt lookup (twenty-eighth session).

    python benchmarks/results/fast/session28/static_table_sim.py TABLE.npz [tuning_answers.json]

The answers file holds the fast default bundle's greedy answers (128 tokens) to 39 Spec-Bench tuning questions
(the 5th-7th of each category; the report runs take the first 4). Each step drafts, as `lookup` with the table
does but without the cost-aware sizing: a context match of 2+ tokens, else the table's chain, else a lone 1-gram
match, 3 tokens deep. Prints τ with and without the table and, per table class (matched n, and whether the step
before accepted a draft), the acceptance rate at depths 1-3: the source of lookup's static priors.
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path

from mtpedge.runtime.static_ngrams import StaticNgrams

DEPTH = 3


def context_chain(context: list[int], min_n: int) -> list[int]:
    for n in range(3, min_n - 1, -1):
        key = context[-n:]
        for start in range(len(context) - n - 1, -1, -1):
            if context[start:start + n] == key:
                return context[start + n: start + n + DEPTH]
    return []


def simulate(answers: list[dict], table: StaticNgrams | None, rates: dict) -> float:
    steps = tokens = 0
    for item in answers:
        context, answer, at, streak = list(item["prompt"]), item["answer"], 0, False
        while at < len(answer):
            chain, label = context_chain(context, 2), None
            if not chain and table is not None:
                n, drafted = table.chain(context, DEPTH)
                chain, label = drafted.tolist(), f"static{n}" if n else None
            if not chain:
                chain = context_chain(context, 1)
            accepted = 0
            while accepted < len(chain) and at + accepted < len(answer) and chain[accepted] == answer[at + accepted]:
                accepted += 1
            if label:
                for depth in range(min(len(chain), len(answer) - at, accepted + 1)):
                    rates[label, streak][depth][0] += depth < accepted
                    rates[label, streak][depth][1] += 1
            streak = accepted > 0
            taken = min(accepted + 1, len(answer) - at)
            context += answer[at:at + taken]
            at += taken
            steps += 1
            tokens += taken
    return tokens / steps


def main() -> None:
    table = StaticNgrams.load(sys.argv[1])
    default = Path(__file__).with_name("tuning_answers.json")
    answers = json.loads(Path(sys.argv[2] if len(sys.argv) > 2 else default).read_text())
    rates: dict = defaultdict(lambda: [[0, 0] for _ in range(DEPTH)])
    print(f"τ without the table {simulate(answers, None, defaultdict(lambda: [[0, 0]] * DEPTH)):.3f}, "
          f"with it {simulate(answers, table, rates):.3f}")
    for (label, streak), by_depth in sorted(rates.items()):
        shown = [f"{hits / tries:.2f} of {tries}" if tries else "-" for hits, tries in by_depth]
        print(f"{label} after an accepted draft: {streak!s:5}  depths 1-3: {', '.join(shown)}")


if __name__ == "__main__":
    main()

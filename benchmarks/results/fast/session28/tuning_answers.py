"""The fast default bundle's greedy answers to Spec-Bench tuning questions (the 5th-7th of each category).

    python benchmarks/results/fast/session28/tuning_answers.py BUNDLE OUT.json [per_category=3]

Writes [{"category", "prompt": ids, "answer": ids}], 128 new tokens each; prompts past 800 tokens are skipped.
"""

from __future__ import annotations

import json
import sys

from mtpedge.bench.questions import SPEC_BENCH
from mtpedge.runtime.engine import Engine
from mtpedge.runtime.generate import generate


def main() -> None:
    engine = Engine.load(sys.argv[1], threads=1)
    per_category = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    by_category: dict[str, list[dict]] = {}
    for line in SPEC_BENCH.read_text().splitlines():
        question = json.loads(line)
        by_category.setdefault(question["category"], []).append(question)
    answers = []
    for category, questions in by_category.items():
        for question in questions[4:4 + per_category]:
            ids = engine.tokenizer.encode_chat([{"role": "user", "content": question["turns"][0]}])
            if len(ids) <= 800:
                answers.append({"category": category, "prompt": ids,
                                "answer": generate(engine, ids, max_new_tokens=128).token_ids})
    with open(sys.argv[2], "w") as out:
        json.dump(answers, out)
    print(len(answers), "answers")


if __name__ == "__main__":
    main()

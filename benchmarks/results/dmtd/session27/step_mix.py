"""dmtd-spec's step mix (lookup chains vs copy drafts) on Spec-Bench questions: steps, tokens and τ per kind of step.

    python step_mix.py DMTD_BUNDLE first 4     # the 52 report questions (first 4 of each category)
"""

import sys
from collections import Counter

from mtpedge.bench.questions import load_questions
from mtpedge.bundles import attach_cost_table
from mtpedge.runtime.drafters import make_drafter
from mtpedge.runtime.engine import Engine
from mtpedge.runtime.generate import generate

bundle, pick, limit = sys.argv[1], sys.argv[2], int(sys.argv[3])
engine = Engine.load(bundle, threads=1)
attach_cost_table(engine, "measured", say=lambda *a: None)
steps = Counter()
for question in load_questions("bench/data/spec_bench/question.jsonl", limit=limit, pick=pick):
    drafter = make_drafter("dmtd-spec", engine)
    choice, observe = drafter.choice, drafter.choice.observe

    def counted(tree, out, path, choice=choice, observe=observe):
        kind = "lookup" if choice.looked_up else ("copy" if len(tree) > 1 else "none")
        steps[kind, "steps"] += 1
        steps[kind, "tokens"] += len(path)
        observe(tree, out, path)

    choice.observe = counted
    prompt = engine.tokenizer.encode_chat([{"role": "user", "content": question.turns[0]}])
    generate(engine, prompt, 128, drafter=drafter, on_overflow="stop")
for kind in ("lookup", "copy", "none"):
    n, t = steps[kind, "steps"], steps[kind, "tokens"]
    if n:
        print(f"{kind}: {n} steps, {t} tokens, τ {t / n:.2f}")
total = sum(v for (_, what), v in steps.items() if what == "steps")
print(f"lookup share of steps {steps['lookup', 'steps'] / total:.1%}")

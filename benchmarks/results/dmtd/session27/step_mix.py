"""dmtd-spec's step mix (lookup chains vs copy drafts) on Spec-Bench questions: counts and τ per kind of step."""
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
steps, tokens = Counter(), 0
for q in load_questions("bench/data/spec_bench/question.jsonl", limit=limit, pick=pick):
    drafter = make_drafter("dmtd-spec", engine)
    kinds = Counter()
    orig = drafter.choice.observe
    def observe(tree, out, path, orig=orig, kinds=kinds, ch=drafter.choice):
        kind = "lookup" if ch.looked_up else ("copy" if len(tree) > 1 else "none")
        kinds[kind, "steps"] += 1
        kinds[kind, "tokens"] += len(path)
        orig(tree, out, path)
    drafter.choice.observe = observe
    r = generate(engine, engine.tokenizer.encode_chat([{"role": "user", "content": q.turns[0]}]), 128, drafter=drafter, on_overflow="stop")
    steps.update(kinds)
for kind in ("lookup", "copy", "none"):
    n, t = steps[kind, "steps"], steps[kind, "tokens"]
    if n:
        print(f"{kind}: {n} steps, {t} tokens, τ {t / n:.2f}")
total = sum(v for (k, w), v in steps.items() if w == "steps")
print(f"lookup share of steps {steps['lookup', 'steps'] / total:.1%}")

"""How often sampled SmolLM2 answers to simple questions name the right answer, by temperature and truncation.

Five questions x N seeds (default 8), 32 new tokens, plain decoding of the default bundle; an answer counts when
it contains one of the question's words. One JSON line per setting (greedy first, one draw). The figures behind
runtime/sampling.py's defaults: benchmarks/results/sampling/on-topic-5q8s.log (the float bundle of the time);
on the quantized default bundle with 24 seeds: on-topic-fast-5q24s.log.

    nice -n 19 python benchmarks/sampling_on_topic.py [--seeds 24] [--configs "T1.0 plain" ...]
"""

import argparse
import json

from mtpedge.bundles import ensure_bundle
from mtpedge.runtime.engine import Engine
from mtpedge.runtime.generate import generate
from mtpedge.runtime.sampling import SamplingConfig

QUESTIONS = [("Name the capital of Japan in one word.", ["tokyo"]),
             ("What is the capital of France?", ["paris"]),
             ("What color is the sky on a clear day?", ["blue"]),
             ("Which planet is known as the Red Planet?", ["mars"]),
             ("What is 2 + 2?", ["4", "four"])]
CONFIGS = [("greedy", 0.0, 0, 1.0, 0.0), ("T1.0 plain", 1.0, 0, 1.0, 0.0),
           ("T1.0 k40 p.95 m.05", 1.0, 40, 0.95, 0.05), ("T1.0 k40 p.95 m.1", 1.0, 40, 0.95, 0.1),
           ("T1.0 k40 p.9 m.1", 1.0, 40, 0.9, 0.1), ("T0.8 k40 p.95 m.05", 0.8, 40, 0.95, 0.05),
           ("T0.8 k40 p.95 m.1", 0.8, 40, 0.95, 0.1)]
parser = argparse.ArgumentParser()
parser.add_argument("--seeds", type=int, default=8)
parser.add_argument("--configs", nargs="+", default=[c[0] for c in CONFIGS], choices=[c[0] for c in CONFIGS])
args = parser.parse_args()
engine = Engine.load(ensure_bundle(None, None, 1024), threads=1)
for name, t, k, p, m in (c for c in CONFIGS if c[0] in args.configs):
    per_q = {}
    for q, keys in QUESTIONS:
        ids = engine.tokenizer.encode_chat([{"role": "user", "content": q}])
        hits = 0
        seeds = [0] if t == 0 else range(args.seeds)
        for s in seeds:
            cfg = SamplingConfig(temperature=t, top_k=k, top_p=p, min_p=m, seed=s)
            text = engine.tokenizer.decode(generate(engine, ids, 32, cfg, on_overflow="stop").token_ids)
            hits += any(w in text.lower() for w in keys)
        per_q[q[:24]] = f"{hits}/{len(seeds)}"
    total = sum(int(v.split("/")[0]) for v in per_q.values())
    print(json.dumps({"config": name, "on_topic": total, "of": len(QUESTIONS) * (1 if t == 0 else args.seeds),
                      "per_question": per_q}), flush=True)

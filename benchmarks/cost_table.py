"""A bundle's measured cost table (runtime/cost_measure.py) at each thread count, several rounds, and what the
tree sizing makes of it: the width it picks for chains of candidates of a given acceptance probability.

    python benchmarks/cost_table.py BUNDLE [--threads 1,2] [--rounds 3] [--repeats 15]

Rounds alternate thread counts; each width's figure is the lowest of the rounds' medians (the call with the
least interference from other jobs). The last line is one JSON document.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from mtpedge.runtime.cost_measure import measure_cost_table  # noqa: E402
from mtpedge.runtime.cost_table import CostTable  # noqa: E402
from mtpedge.runtime.engine import Engine  # noqa: E402
from mtpedge.runtime.tree_sizing import size_tree  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bundle", type=Path)
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args(argv)
    counts = [int(t) for t in args.threads.split(",")]
    engines = {t: Engine.load(args.bundle, threads=t) for t in counts}
    best: dict[int, dict[int, float]] = {t: {} for t in counts}
    for _ in range(args.rounds):
        for t, engine in engines.items():
            table = measure_cost_table(engine, repeats=args.repeats)
            for width, seconds in table.seconds.items():
                best[t][width] = min(best[t].get(width, np.inf), seconds)
    doc = {"bundle": str(args.bundle), "load_average": os.getloadavg(), "tables": {}}
    for t, engine in engines.items():
        m = engine.manifest
        table = CostTable(best[t], m.model_name, m.source_sha256, m.context, f"{t} thread(s)", "measured")
        one = table.seconds[min(table.seconds)]
        print(f"## {t} thread(s), context {m.context} (lowest median of {args.rounds} rounds x {args.repeats} calls)")
        for width, seconds in sorted(table.seconds.items()):
            print(f"  width {width:>3}: {seconds * 1e3:7.2f} ms  x{seconds / one:.2f} of width 1")
        picks = {}
        for p in (0.3, 0.5, 0.7, 0.9):
            chain = p ** np.arange(1, 64)  # a chain whose every draft is accepted with probability p
            size = size_tree(chain, table)
            picks[str(p)] = {"width": size.width, "expected_tokens": round(size.expected_tokens, 3),
                             "tokens_per_s": round(size.tokens_per_s, 1)}
            print(f"  a chain accepted with p = {p}: width {size.width} ({size.candidates} drafts), "
                  f"{size.expected_tokens:.2f} tokens per call, {size.tokens_per_s:.1f} tokens/s expected "
                  f"(plain {1 / one:.1f})")
        doc["tables"][str(t)] = {"seconds": {str(w): s for w, s in sorted(table.seconds.items())}, "picks": picks}
    print(json.dumps(doc))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

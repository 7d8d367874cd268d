"""Cost-aware `lookup` on fast bundles that differ in their decode widths, in one interleaved bench run.

    python benchmarks/lookup_ab.py --out DIR [--limit 1 --pick between] [--one-table] BUNDLE [BUNDLE ...]

Every bundle gets its measured cost table (cached with the others); methods: plain decoding on the first bundle,
then `lookup` on each. --one-table adds, per bundle, `lookup` with one acceptance table for every match (what
lookup did before it kept rates per match class: runtime/drafters/lookup.py). Writes bench.json / bench.md.
Figures: benchmarks/results/fast/README.md section 24.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from mtpedge.bench.methods import DrafterMethod
from mtpedge.bench.questions import SPEC_BENCH
from mtpedge.bench.suite import BenchSettings, bench_document, write_report
from mtpedge.bundles import cache_root
from mtpedge.runtime.cost_measure import cost_table_from_option
from mtpedge.runtime.cost_table import decode_widths
from mtpedge.runtime.drafters.lookup import NgramSource
from mtpedge.runtime.engine import Engine


class OneTable(NgramSource):
    """lookup's acceptance rates as one table whatever matched (the match class is always the same)."""

    def match_class(self, n: int) -> tuple[int, bool]:
        return 0, False


def one_table(method: DrafterMethod) -> DrafterMethod:
    make = method._make

    def made():
        drafter = make()
        s = drafter.source
        drafter.source = OneTable(s.max_ngram, s.min_ngram, s.length, s.branches)
        return drafter

    method._make = made
    return method


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bundles", nargs="+", type=Path)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--limit", type=int, default=1)
    parser.add_argument("--pick", default="between", help="first (the report set) | between (tuning) | spread")
    parser.add_argument("--time-limit", type=float)
    parser.add_argument("--one-table", action="store_true")
    args = parser.parse_args()
    engines = []
    for folder in args.bundles:
        engine = Engine.load(folder, threads=1)
        engine.cost_table = cost_table_from_option(engine, "measured", cache_root() / "costs", say=print)
        engines.append(engine)
    label = lambda e: "w" + "-".join(str(w) for w in decode_widths(e.manifest))  # noqa: E731
    methods = [DrafterMethod(engines[0], "none", name="none")]
    for engine in engines:
        if args.one_table:
            methods.append(one_table(DrafterMethod(engine, "lookup", name=f"lookup-{label(engine)}-one-table")))
        methods.append(DrafterMethod(engine, "lookup", name=f"lookup-{label(engine)}"))
    settings = BenchSettings(bundle=args.bundles[0], questions=SPEC_BENCH, limit=args.limit, pick=args.pick,
                             max_new_tokens=128, methods=tuple(m.name for m in methods), threads=1, sweep=False,
                             time_limit_s=args.time_limit, cost_cache=cache_root() / "costs")
    doc = bench_document(settings, engines[0], methods, say=lambda msg: print(msg, file=sys.stderr, flush=True))
    write_report(doc, args.out, plots=False)
    print((args.out / "bench.md").read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

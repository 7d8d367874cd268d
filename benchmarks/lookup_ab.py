"""Cost-aware `lookup` on fast bundles that differ in their decode widths, in one interleaved bench run.

    python benchmarks/lookup_ab.py --out DIR [--limit 1 --pick between] [--variants one-table,...] \
        [--cost-model measured|FILE] BUNDLE [BUNDLE ...]

Every bundle gets its measured cost table (cached with the others), or the one file named; methods: plain
decoding on the first bundle, then `lookup` on each, and `lookup` variants beside it, per bundle:
  one-table       one acceptance table for every match (what lookup did before it kept rates per match class)
  uniform-priors  every match class starts at 0.5 worth 2 tries (before the measured priors)
  priors-xW       the measured priors worth W tries (runtime/drafters/lookup.py)
  table-only      trees sized from the cost table alone, not corrected by the run's calls (tree_sizing.CallCosts)
  first-call-from-1  a width's first call averaged from ratio 1, not from the ratio it carried (CallCosts before
                  the thirty-first session)
  fresh-table     a cost table measured at the start of this run instead of the cached one
  level-and-shape one running level for every call times a running shape per width (LevelAndShape)
Writes bench.json / bench.md. Figures: benchmarks/results/fast/README.md sections 24-26 and 38.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from mtpedge.bench.methods import DrafterMethod
from mtpedge.bench.questions import SPEC_BENCH
from mtpedge.bench.suite import BenchSettings, bench_document, write_report
from mtpedge.bundles import cache_root
from mtpedge.runtime.acceptance import DepthRates
from mtpedge.runtime.cost_measure import cost_table_from_option, measure_cost_table
from mtpedge.runtime.cost_table import decode_widths
from mtpedge.runtime.drafters.base import Drafter
from mtpedge.runtime.drafters.lookup import NgramSource
from mtpedge.runtime.engine import Engine
from mtpedge.runtime.tree_sizing import CallCosts


class OneTable(NgramSource):
    """lookup's acceptance rates as one table whatever matched (the match class is always the same)."""

    def match_class(self, n: int) -> tuple[int, bool]:
        return 0, False


class UniformPriors(NgramSource):
    def new_rates(self, match_class: tuple[int, bool]) -> DepthRates:
        return DepthRates(self.length)


def weighted_priors(weight: float) -> type[NgramSource]:
    class Weighted(NgramSource):
        def new_rates(self, match_class: tuple[int, bool]) -> DepthRates:
            rates = super().new_rates(match_class)
            rates.prior_hits *= weight / rates.prior_weight
            rates.prior_weight = weight
            return rates
    return Weighted


class TableOnly(CallCosts):
    def observe(self, width: int, seconds: float) -> None:
        pass


class FirstCallFromOne(CallCosts):
    def observe(self, width: int, seconds: float) -> None:
        if self.table.origin != "flat" and width in self.table.seconds and seconds > 0:
            self.ratios.setdefault(width, 1.0)
        super().observe(width, seconds)


class LevelAndShape(CallCosts):
    """One running level for every call (the machine's state now) times a running shape per width (its calls
    against the level): a width called rarely follows the level instead of keeping the ratio of its last call."""

    def __init__(self, table, decay: float = 0.9, bounds: tuple[float, float] = (0.5, 2.0)) -> None:
        super().__init__(table, decay, bounds)
        self.level, self.shapes = 1.0, {}

    def observe(self, width: int, seconds: float) -> None:
        if self.table.origin == "flat" or width not in self.table.seconds or not seconds > 0:
            return
        ratio = min(max(seconds / self.table.seconds[width], self.bounds[0]), self.bounds[1])
        self.level = self.decay * self.level + (1 - self.decay) * ratio
        self.shapes[width] = self.decay * self.shapes.get(width, 1.0) + (1 - self.decay) * ratio / self.level
        self.ratios = {w: self.level * self.shapes.get(w, 1.0) for w in self.table.seconds}
        self.current = self.table.with_seconds({w: s * self.ratios[w] for w, s in self.table.seconds.items()})


def with_change(method: DrafterMethod, change: Callable[[Drafter], None]) -> DrafterMethod:
    make = method._make

    def made():
        drafter = make()
        change(drafter)
        return drafter

    method._make = made
    return method


def source_change(source_class: type[NgramSource]) -> Callable[[Drafter], None]:
    def change(drafter: Drafter) -> None:
        s = drafter.source
        drafter.source = source_class(s.max_ngram, s.min_ngram, s.length, s.branches)
    return change


def table_only(drafter: Drafter) -> None:
    if drafter.sizer is not None:
        drafter.sizer.call_costs = TableOnly(drafter.sizer.costs)


def first_call_from_one(drafter: Drafter) -> None:
    if drafter.sizer is not None:
        drafter.sizer.call_costs = FirstCallFromOne(drafter.sizer.costs)


def level_and_shape(drafter: Drafter) -> None:
    if drafter.sizer is not None:
        drafter.sizer.call_costs = LevelAndShape(drafter.sizer.costs)


def fresh_table(engine: Engine) -> Callable[[Drafter], None]:
    table = measure_cost_table(engine)
    print(f"fresh-table: measured now {dict((w, round(s * 1e3, 2)) for w, s in table.seconds.items())} ms; "
          f"the cached one {dict((w, round(s * 1e3, 2)) for w, s in engine.cost_table.seconds.items())} ms")

    def change(drafter: Drafter) -> None:
        if drafter.sizer is not None:
            drafter.sizer.costs, drafter.sizer.call_costs = table, CallCosts(table)
    return change


def variant_change(variant: str, engine: Engine) -> Callable[[Drafter], None]:
    if variant == "one-table":
        return source_change(OneTable)
    if variant == "uniform-priors":
        return source_change(UniformPriors)
    if variant.startswith("priors-x"):
        return source_change(weighted_priors(float(variant.removeprefix("priors-x"))))
    if variant == "table-only":
        return table_only
    if variant == "first-call-from-1":
        return first_call_from_one
    if variant == "level-and-shape":
        return level_and_shape
    if variant == "fresh-table":
        return fresh_table(engine)
    raise SystemExit(f"unknown variant {variant!r}: one-table, uniform-priors, priors-xW, table-only, "
                     "first-call-from-1, fresh-table or level-and-shape")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bundles", nargs="+", type=Path)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--limit", type=int, default=1)
    parser.add_argument("--pick", default="between", help="first (the report set) | between (tuning) | spread")
    parser.add_argument("--time-limit", type=float)
    parser.add_argument("--cost-model", default="measured", help="measured (cached) or a cost-table file")
    parser.add_argument("--variants", default="",
                        help="comma-separated: one-table, uniform-priors, priors-xW, table-only, "
                             "first-call-from-1, fresh-table, level-and-shape")
    args = parser.parse_args()
    engines = []
    for folder in args.bundles:
        engine = Engine.load(folder, threads=1)
        engine.cost_table = cost_table_from_option(engine, args.cost_model, cache_root() / "costs", say=print)
        engines.append(engine)
    label = lambda e: "w" + "-".join(str(w) for w in decode_widths(e.manifest))  # noqa: E731
    methods = [DrafterMethod(engines[0], "none", name="none")]
    for engine in engines:
        for variant in filter(None, args.variants.split(",")):
            methods.append(with_change(DrafterMethod(engine, "lookup", name=f"lookup-{label(engine)}-{variant}"),
                                       variant_change(variant, engine)))
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

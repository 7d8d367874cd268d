"""Hybrid drafting: mask-probe (ESP) and prompt-lookup candidates in ONE tree, verified in ONE call.

Both sources feed one candidate pool under the same root, each candidate scored by its estimated
acceptance probability (the rule, so that the two kinds compete on one scale):
    lookup node at chain depth d, r-th continuation:  prod_{j<=d} rate_j / (r + 1)
        (rate_j: online, Laplace-smoothed P(accept at depth j | parent accepted) of lookup nodes)
    mask node at depth i:  P(parent) * p_i(token)   (p_i: the softmax of mask i's forecast, as ESP's dynamic tree)
A node never outranks its parent, and a token offered by both sources is one node with the higher score.

Every token node gets its k mask slots (B = width // (k + 1) token nodes), so the next step is seeded
wherever the accepted path ends; a lookup chain is at most B - 1 deep.

Defaults, from measurement (SmolLM2-135M float32, learned masks, 13 Spec-Bench questions x 128 tokens that
are not among the 52 below, benchmarks/results/hybrid_sweep_13q.txt; τ = tokens per decode call):
    width 16: τ 1.99; branches 3: 1.99; min_ngram 2: 1.94; width 32: 2.19; width 64: 2.37
Two variants measured nothing and were removed: masks only where the path likely ends (by expected value,
"mask_gain" 0.5 / 1.0: τ 2.01 / 2.00 at width 16, 2.18 at 32, 2.33 at 64) and lookup chains hung under the
best mask candidates ("extend" 1: 1.99), all within noise of the plain rule. The width is the lever. Width 16
stays the default: on this CPU a width-64 call costs 5.5x a width-1 call, width 16 2x
(benchmarks/results/esp_bench_smollm2_52q_learned.log); on an NPU, where width is cheap, pass a larger one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ..tree import DraftTree
from ..tree_build import concat_pools, mask_pool, select_tree, select_tree_scored, softmax_rows
from .base import Drafter, option, sizer_for, width_for
from .esp import MaskOptions, MaskProbe
from .lookup import STATIC_HELP, NgramSource, static_table

if TYPE_CHECKING:
    from ..engine import Engine
    from ..graphs import GraphOutput


@dataclass(frozen=True)
class HybridOptions(MaskOptions):
    width: int = option(16, "slots per decode call (tree nodes + mask slots)")
    max_ngram: int = option(3, "longest n-gram matched")
    min_ngram: int = option(1, "shortest n-gram matched")
    branches: int = option(2, "distinct n-gram continuations in one tree")
    # auto: 13 tuning questions τ 1.54 against 1.42 without the table, both 0.91x plain decoding here
    # (benchmarks/results/fast/README.md section 33)
    static: str = option("auto", STATIC_HELP)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.branches < 1 or not 1 <= self.min_ngram <= self.max_ngram:
            raise ValueError(f"the hybrid needs branches >= 1 and 1 <= min_ngram <= max_ngram, got {self.branches}, "
                             f"{self.min_ngram}, {self.max_ngram}")


class HybridDrafter(Drafter):
    """mask-probe (ESP) and prompt-lookup candidates in one tree under one slot budget"""

    name = "hybrid"
    Options = HybridOptions
    sized = True

    def __init__(self, engine: Engine, options: HybridOptions) -> None:
        config = options.mask_config(engine)
        self.probe = MaskProbe(engine, config)
        self.lora_on_slots = self.probe.lora_on_slots
        self.width = width_for(engine, options.width)
        self.max_width = engine.graphs.max_decode_width
        self.k = options.masks
        self.sizer = sizer_for(engine)
        self.nodes = self.width // (options.masks + 1)  # token nodes (root included), each with its masks
        if self.nodes < 1:
            raise ValueError(f"a width of {self.width} slots cannot hold a root and its {options.masks} mask slot(s)")
        table = static_table(options.static, engine)
        self.lookup = NgramSource(options.max_ngram, options.min_ngram, max(1, self.nodes - 1), options.branches,
                                  table)
        self.settings = {"drafter": self.name, "masks": options.masks, "mask_init": config.init,
                         "mask_update": config.update_rate, "width": self.width, "max_ngram": options.max_ngram,
                         "min_ngram": options.min_ngram, "branches": options.branches,
                         "static": "none" if table is None else options.static}
        self._from_lookup = np.ones(1, dtype=bool)

    def start(self, engine: Engine, prompt_ids: Sequence[int]) -> None:
        self.probe.start(prompt_ids)
        self.lookup.reset()

    def propose(self, context_ids: Sequence[int], root: int, lead: int = 0
                ) -> tuple[DraftTree, np.ndarray]:
        lookup_pool = self.lookup.pool(context_ids, root)
        pools = [lookup_pool]
        if self.probe.forecast is not None:
            pools.append(mask_pool(softmax_rows(self.probe.forecast), self.nodes - 1, root))
        pool = concat_pools(*pools)
        nodes = max(1, min(self.nodes, (self.max_width - lead) // (self.k + 1)))
        if self.sizer is not None and lead + self.k + 1 <= self.max_width:
            # only the candidates that pay for the wider call they (and their masks) need
            scores = select_tree_scored(*pool, nodes)[3]
            nodes = 1 + self.sizer.size(scores[1:], self.k + 1, lead + self.k + 1).candidates
        tokens, parents, chosen = select_tree(*pool, nodes)
        self._from_lookup = chosen < lookup_pool[0].shape[0]  # lookup entries come first in the pool
        return self.probe.finish_tree(tokens, parents)

    def observe(self, tree: DraftTree, out: GraphOutput, path: list[int]) -> None:
        self.lookup.record(tree, self._from_lookup, path)
        self.probe.observe(tree, self._from_lookup.shape[0], out, path)
        if self.sizer is not None:
            self.sizer.observe(len(path) - 1, out.seconds)

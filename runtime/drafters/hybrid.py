"""Hybrid drafting: mask-probe (ESP) and prompt-lookup candidates in ONE tree, verified in ONE call.

Both sources feed one candidate pool under the same root, each candidate scored by its estimated
acceptance probability (the rule, so that the two kinds compete on one scale):
    lookup node at chain depth d, r-th continuation:  prod_{j<=d} rate_j / (r + 1)
        (rate_j: online, Laplace-smoothed P(accept at depth j | parent accepted) of lookup nodes)
    mask node at depth i:  P(parent) * p_i(token)   (p_i: the softmax of mask i's forecast, as ESP's dynamic tree)
The best B = width // (k + 1) scores form the tree (a node never outranks its parent; a token offered by
both sources is one node with the higher score), and every token node gets its k mask slots, so the next
step is seeded wherever the accepted path ends.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..engine import Engine
from ..graphs import GraphOutput
from ..mask_embeddings import MaskConfig
from ..tree import DraftTree
from ..tree_build import concat_pools, mask_pool, select_tree, softmax_rows
from .esp import MaskProbe, default_mask_init
from .lookup import NgramSource


class HybridDrafter:
    name = "hybrid"

    def __init__(self, engine: Engine, masks: int = 1, mask_init: str | None = None, mask_update: float | None = None,
                 width: int = 16, max_ngram: int = 3, min_ngram: int = 1, branches: int = 2, seed: int = 0) -> None:
        mask_init = mask_init or default_mask_init(engine)
        if mask_update is None:  # the online update pulls learned masks away from what they were trained to be
            mask_update = 0.0 if mask_init == "learned" else 0.1
        self.probe = MaskProbe(engine, MaskConfig(init=mask_init, slots=masks, update_rate=mask_update, seed=seed))
        self.lora_on_slots = self.probe.lora_on_slots  # read by generate()
        width = min(width, engine.graphs.max_width)
        self.nodes = width // (masks + 1)
        if self.nodes < 1:
            raise ValueError(f"a width of {width} slots cannot hold a root and its {masks} mask slot(s)")
        self.lookup = NgramSource(max_ngram, min_ngram, max(1, self.nodes - 1), branches)
        self.settings = {"drafter": self.name, "masks": masks, "mask_init": mask_init, "mask_update": mask_update,
                         "width": width, "max_ngram": max_ngram, "min_ngram": min_ngram, "branches": branches}
        self._from_lookup = np.ones(1, dtype=bool)

    def start(self, engine: Engine, prompt_ids: Sequence[int], prefill_logits: np.ndarray) -> None:
        self.probe.start(prompt_ids)
        self.lookup.rates.reset()

    def propose(self, context_ids: Sequence[int], root: int) -> tuple[DraftTree, np.ndarray]:
        lookup_pool = self.lookup.pool(context_ids, root)
        pools = [lookup_pool]
        if self.probe.forecast is not None:
            pools.append(mask_pool(softmax_rows(self.probe.forecast), self.nodes - 1, root))
        tokens, parents, chosen = select_tree(*concat_pools(*pools), self.nodes)
        self._from_lookup = chosen < lookup_pool[0].shape[0]  # lookup entries come first in the pool
        return self.probe.finish_tree(tokens, parents)

    def observe(self, tree: DraftTree, out: GraphOutput, path: list[int]) -> None:
        self.lookup.record(tree, self._from_lookup, path)
        self.probe.observe(tree, self._from_lookup.shape[0], out, path)

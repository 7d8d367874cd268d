"""Hybrid drafting: mask-probe (ESP) and prompt-lookup candidates in ONE tree, verified in ONE call.

Both sources feed one candidate pool under the same root, each candidate scored by its estimated
acceptance probability (the rule, so that the two kinds compete on one scale):
    lookup node at chain depth d, r-th continuation:  prod_{j<=d} rate_j / (r + 1)
        (rate_j: online, Laplace-smoothed P(accept at depth j | parent accepted) of lookup nodes)
    mask node at depth i:  P(parent) * p_i(token)   (p_i: the softmax of mask i's forecast, as ESP's dynamic tree)
A node never outranks its parent, and a token offered by both sources is one node with the higher score.

Where the k mask slots go (`mask_gain`):
    None    every token node gets its k mask slots (B = width // (k + 1) token nodes), so the next step is
            seeded wherever the accepted path ends; a lookup chain is at most B - 1 deep.
    g       the width is split by expected value (tree_build.mask_owners_by_value): n token nodes are worth
            the sum of their scores, mask slots under node i are worth g * P(i is the deepest accepted node)
            (g: the tokens a forecast adds to the next step). Long, confident lookup chains then take most
            of the width with masks only where the path likely ends; if it ends elsewhere, the next step
            drafts from lookup alone.
`extend` > 0 hangs a lookup chain under each of the `extend` best depth-1 mask candidates.

Defaults, from measurement (SmolLM2-135M float32, learned masks, 13 Spec-Bench questions x 128 tokens that
are not in esp_bench's 52, benchmarks/drafter_sweep.py; τ = tokens per decode call):
    width 16: τ 1.99 (mask_gain None), 2.01 (0.5), 2.00 (1.0); extend 1: 1.99; branches 3: 1.99; min_ngram 2: 1.94
    width 32: 2.19 (None), 2.18 (0.5);  width 64: 2.37 (None), 2.33 (0.5)
So mask_gain and extend stay off (within noise; they help only in copy-heavy text) and the width is the
lever. Width 16 stays the default: on this CPU a width-64 call costs 5.5x a width-1 call, width 16 2x
(benchmarks/results/esp_bench_smollm2_52q_learned.log); on an NPU, where width is cheap, pass a larger one.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..engine import Engine
from ..graphs import GraphOutput
from ..mask_embeddings import MaskConfig
from ..tree import DraftTree
from ..tree_build import concat_pools, mask_pool, select_tree, select_tree_with_owners, softmax_rows
from .esp import MaskProbe, default_mask_init
from .lookup import NgramSource


class HybridDrafter:
    name = "hybrid"

    def __init__(self, engine: Engine, masks: int = 1, mask_init: str | None = None, mask_update: float | None = None,
                 width: int = 16, max_ngram: int = 3, min_ngram: int = 1, branches: int = 2,
                 mask_gain: float | None = None, extend: int = 0, seed: int = 0) -> None:
        mask_init = mask_init or default_mask_init(engine)
        if mask_update is None:  # the online update pulls learned masks away from what they were trained to be
            mask_update = 0.0 if mask_init == "learned" else 0.1
        if mask_gain is not None and mask_gain < 0:
            raise ValueError(f"mask_gain is the tokens a mask forecast adds to a step: >= 0, got {mask_gain}")
        self.probe = MaskProbe(engine, MaskConfig(init=mask_init, slots=masks, update_rate=mask_update, seed=seed))
        self.lora_on_slots = self.probe.lora_on_slots  # read by generate()
        self.width = min(width, engine.graphs.max_width)
        self.k = masks
        self.mask_gain = mask_gain
        self.extend = extend
        # token nodes (root included): all carry masks, or as many as fit beside the root's masks
        self.nodes = self.width // (masks + 1) if mask_gain is None else self.width - masks
        if self.nodes < 1:
            raise ValueError(f"a width of {self.width} slots cannot hold a root and its {masks} mask slot(s)")
        self.lookup = NgramSource(max_ngram, min_ngram, max(1, self.nodes - 1), branches)
        self.settings = {"drafter": self.name, "masks": masks, "mask_init": mask_init, "mask_update": mask_update,
                         "width": self.width, "max_ngram": max_ngram, "min_ngram": min_ngram, "branches": branches,
                         "mask_gain": mask_gain, "extend": extend}
        self._from_lookup = np.ones(1, dtype=bool)
        self._owners: np.ndarray | None = None

    def start(self, engine: Engine, prompt_ids: Sequence[int], prefill_logits: np.ndarray) -> None:
        self.probe.start(prompt_ids)
        self.lookup.rates.reset()

    def propose(self, context_ids: Sequence[int], root: int) -> tuple[DraftTree, np.ndarray]:
        lookup_pool = self.lookup.pool(context_ids, root)
        pools = [lookup_pool]
        if self.probe.forecast is not None:
            masks = mask_pool(softmax_rows(self.probe.forecast), self.nodes - 1, root)
            pools.append(self._extend(masks, context_ids) if self.extend else masks)
        pool = concat_pools(*pools)
        if self.mask_gain is None:
            tokens, parents, chosen = select_tree(*pool, self.nodes)
            self._owners = None
        else:
            tokens, parents, chosen, self._owners = select_tree_with_owners(pool, self.width, self.k, self.mask_gain)
        self._from_lookup = chosen < lookup_pool[0].shape[0]  # lookup entries come first in the pool
        return self.probe.finish_tree(tokens, parents, self._owners)

    def _extend(self, pool: tuple[np.ndarray, np.ndarray, np.ndarray], context_ids: Sequence[int]
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Hang a lookup chain under each of the `extend` best depth-1 mask candidates: the continuation of
        the context as if that candidate came next (scored P(candidate) * the lookup chain's rates)."""
        tokens, parents, scores = pool
        context = np.asarray(context_ids, dtype=np.int64)
        extra_tokens, extra_parents, extra_scores = [tokens], [parents], [scores]
        size = tokens.shape[0]
        for node in np.flatnonzero(parents == 0)[: self.extend]:
            found = self.lookup.continuations(np.append(context, tokens[node]), self.nodes - 2)
            if not found:
                continue
            chain_scores = self.lookup.rates.chain_scores(found[0].size, float(scores[node]))
            chain = found[0][: chain_scores.size]
            extra_tokens.append(chain)
            extra_parents.append(np.concatenate([[node], size + np.arange(chain.size - 1)]))
            extra_scores.append(chain_scores)
            size += chain.size
        return np.concatenate(extra_tokens), np.concatenate(extra_parents), np.concatenate(extra_scores)

    def observe(self, tree: DraftTree, out: GraphOutput, path: list[int]) -> None:
        self.lookup.record(tree, self._from_lookup, path)
        self.probe.observe(tree, self._from_lookup.shape[0], out, path, self._owners)

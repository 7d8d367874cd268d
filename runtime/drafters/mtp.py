"""MTP: self-speculative decoding with a trained multi-token adapter (methods.md section 2).

Each step is ONE graph call. Its token nodes are the root and a chain of drafts; its SLOT nodes are the
adapter's learned masks (gate 1: the gated LoRA is on there, off at token nodes, so every token node's
logits and K/V are exactly the base model's and verification stays lossless):

    linear     [x0, d1..dm | k masks after dm]              a rejection leaves no masks under the accepted
                                                            node: the next step drafts nothing
    quadratic  [x0, d1..dm | k masks after EVERY node]      (m+1)(k+1) slots; whatever prefix is accepted,
                                                            the masks under its last node give k fresh drafts
    tree       [x0, a TREE of drafts | k masks after the    `width` slots: the sampler head expands the `branch`
               nodes most likely to end the accepted path]  best tokens of every kept node, depth by depth
                                                            (scores = products of its probabilities), and the
                                                            width is split between draft nodes and mask owners
                                                            by expected value (tree_build.mask_owners_by_value,
                                                            `mask_gain` = tokens a forecast adds). If the path
                                                            ends on a node without masks, the next step drafts
                                                            from the masks of its deepest ancestor that has
                                                            some, minus those the path used (deepest_owner).
                                                            `lookup` (default on) adds prompt-lookup chains to the
                                                            same candidate pool, scored as in the hybrid drafter.

The drafts of the next step come from the masks under the deepest accepted node: through the sampler head
(each conditioned on the previous draft, the first on the new root), or the masks' plain logits (argmax)
when the adapter has no sampler head or `sampler=False`.

Tree is the default: on 13 exploration questions x 128 tokens (not the benchmark's 52; SmolLM2, k = 3,
width 16) it reached τ 1.63 against quadratic's 1.53 with the same adapter at the same call width
(benchmarks/results/mtp/sweep-13q.txt); branch 12 or a flatter scoring (p^(1/2)) changed τ by < 0.015.
mask_gain 2.0 is from the same sweep (width 16): τ 1.527 / 1.578 / 1.586 at mask_gain 0.5 / 1.0 / 2.0.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ..tree import SLOT, DraftTree
from ..tree_build import (
    attach_mask_slots,
    concat_pools,
    expansion_pool,
    mask_slot_index,
    select_tree_with_owners,
    softmax_rows,
    top_tokens,
)
from .base import Drafter, option, width_for
from .lookup import STATIC_HELP, NgramSource, static_table
from .mtp_head import SamplerHead, learned_masks, mtp_extras

if TYPE_CHECKING:
    from ..engine import Engine
    from ..graphs import GraphOutput

LAYOUTS = ("linear", "quadratic", "tree")


def linear_tree(tokens: np.ndarray, k: int) -> DraftTree:
    """A chain of token nodes with a chain of k SLOT nodes under its last node."""
    n = tokens.shape[0]
    parents = np.arange(-1, n + k - 1)
    return DraftTree(np.concatenate([tokens, np.full(k, SLOT)]), parents)


@dataclass(frozen=True)
class MtpOptions:
    mtp_layout: str = option("tree", "masks after the last draft only (linear), after every draft of a chain "
                                     "(quadratic), or a tree of drafts with masks where the path likely ends", LAYOUTS)
    masks: int | None = option(None, "mask slots k (default: as many as the adapter was trained with)")
    sampler: bool = option(True, "draft through the adapter's sampler head (false: the masks' plain argmax)")
    candidates: int = option(64, "sampler head: score only this many top rows of a mask's logits (0 = all)")
    width: int = option(16, "tree layout: slots per decode call")
    branch: int = option(4, "tree layout: best tokens tried after each node")
    mask_gain: float = option(2.0, "tree layout: tokens a mask forecast is worth when placing masks")
    # on by default for the tree: with the shipped adapter, 13 tuning questions tau 1.71 -> 2.00 (0.70x -> 0.91x
    # plain), 52 report questions 1.75 -> 1.94 (benchmarks/results/mtp/README.md, eighth session)
    lookup: bool | None = option(None, "tree layout: prompt-lookup chains in the same tree, as the hybrid "
                                       "(default: on for the tree layout)")
    # auto: 52 report questions τ 2.27 against 2.22 without the table (benchmarks/results/mtp/README.md,
    # twenty-eighth session)
    static: str = option("auto", STATIC_HELP)

    def __post_init__(self) -> None:
        if self.mtp_layout not in LAYOUTS:
            raise ValueError(f"unknown MTP layout {self.mtp_layout!r}: choose linear, quadratic or tree")
        if self.mtp_layout == "tree" and (self.branch < 1 or self.mask_gain < 0):
            raise ValueError(f"the tree layout needs branch >= 1 and mask_gain >= 0, got {self.branch} and "
                             f"{self.mask_gain}")
        if self.lookup and self.mtp_layout != "tree":
            raise ValueError("lookup candidates need the tree layout: pass mtp_layout=tree")


class MtpDrafter(Drafter):
    """drafts from a trained multi-token adapter (learned masks, gated LoRA, sampler head)"""

    name = "mtp"
    Options = MtpOptions

    def __init__(self, engine: Engine, options: MtpOptions) -> None:
        extras = mtp_extras(engine)
        mtp_layout, masks, sampler, candidates = options.mtp_layout, options.masks, options.sampler, options.candidates
        branch, mask_gain = options.branch, options.mask_gain
        lookup = options.lookup if options.lookup is not None else mtp_layout == "tree"
        trained_k = int(extras["k"])
        self.k = trained_k if masks is None else masks
        if not 1 <= self.k <= trained_k:
            raise ValueError(f"the adapter was trained with k = {trained_k} masks: use masks=1..{trained_k}")
        self.layout = mtp_layout
        self.masks = learned_masks(engine)[: self.k]
        self.lora_on_slots = bool(extras.get("rank"))  # gate 1 at the mask slots
        self.head = SamplerHead(engine, candidates) if sampler and extras.get("sampler") else None
        self.width, self.branch, self.mask_gain = width_for(engine, options.width), branch, mask_gain
        self.max_width = engine.graphs.max_decode_width
        need = {"quadratic": (self.k + 1) ** 2, "linear": 2 * self.k + 1, "tree": self.k + 2}[mtp_layout]
        if mtp_layout == "tree" and self.width < need:
            raise ValueError(f"a width of {self.width} cannot hold a root, one draft and {self.k} masks: use >= {need}")
        if need > self.max_width:
            raise ValueError(f"the {mtp_layout} layout with k = {self.k} needs {need} slots, the widest decode graph "
                             f"has {self.max_width}: re-export with a wider --decode-widths or use fewer masks")
        self.settings = {"drafter": self.name, "mtp_layout": mtp_layout, "masks": self.k,
                         "sampler": self.head is not None, "candidates": candidates, "lora_rank": extras.get("rank")}
        if mtp_layout == "tree":
            self.settings.update(width=self.width, branch=branch, mask_gain=mask_gain, lookup=lookup)
        table = static_table(options.static, engine) if lookup else None
        self.settings["static"] = "none" if table is None else options.static
        self.lookup = NgramSource(3, 1, max(1, self.width - self.k - 1), 2, table) if lookup else None
        self._from_lookup = np.zeros(1, dtype=bool)
        self._pending: tuple[np.ndarray | None, np.ndarray] | None = None  # (hidden, logits) of the next masks
        self._n_tokens = 1
        self._owners: np.ndarray | None = None  # tree layout: the token nodes that carry masks

    def start(self, engine: Engine, prompt_ids: Sequence[int]) -> None:
        self._pending = None
        if self.lookup is not None:
            self.lookup.reset()

    def drafts(self, root: int) -> list[int]:
        if self._pending is None:
            return []
        hidden, logits = self._pending
        if self.head is not None and hidden is not None:
            return self.head.draft(root, hidden, logits)
        return [int(np.argmax(row)) for row in logits]

    def expand(self, depth: int, prev_tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The `branch` best tokens of mask `depth` after each of `prev_tokens`: the sampler head's, or the
        mask's plain forecast (the same for every parent) without one."""
        hidden, logits = self._pending
        if self.head is not None and hidden is not None:
            return self.head.top_next_tokens(prev_tokens, hidden[depth], logits[depth], self.branch)
        probs = softmax_rows(logits[depth: depth + 1])[0]
        best = top_tokens(probs, self.branch)
        return np.tile(best, (prev_tokens.shape[0], 1)), np.tile(probs[best], (prev_tokens.shape[0], 1))

    def propose_tree(self, context_ids: Sequence[int], root: int, width: int) -> tuple[DraftTree, np.ndarray]:
        pools = [] if self.lookup is None else [self.lookup.pool(context_ids, root)]
        if self._pending is not None:
            depths = self._pending[1].shape[0]
            pools.append(expansion_pool(root, self.expand, depths, width - self.k - 1))
        if not pools:
            tokens, parents, owners = np.array([root], dtype=np.int64), np.array([-1]), np.zeros(1, dtype=np.int64)
            chosen = np.zeros(1, dtype=np.int64)
        else:
            tokens, parents, chosen, owners = select_tree_with_owners(concat_pools(*pools), width, self.k,
                                                                      self.mask_gain)
        # lookup entries come first in the pool; the root (pool index 0) counts as neither
        lookup_size = pools[0][0].shape[0] if self.lookup is not None else 1
        self._from_lookup = (chosen > 0) & (chosen < lookup_size)
        self._n_tokens, self._owners = tokens.shape[0], owners
        return attach_mask_slots(tokens, parents, self.k, owners), np.tile(self.masks, (owners.size, 1))

    def propose(self, context_ids: Sequence[int], root: int, lead: int = 0
                ) -> tuple[DraftTree, np.ndarray]:
        if self.layout == "tree":  # a tree narrower than root + one draft + its masks does not pay: the full one
            room = self.max_width - lead
            width = self.width if room < self.k + 2 else min(self.width, room)
            return self.propose_tree(context_ids, root, width)
        tokens = np.array([root, *self.drafts(root)], dtype=np.int64)
        self._n_tokens = n = tokens.shape[0]
        if self.layout == "linear":
            return linear_tree(tokens, self.k), self.masks.copy()
        tree = attach_mask_slots(tokens, np.arange(-1, n - 1), self.k)
        return tree, np.tile(self.masks, (n, 1))

    def observe(self, tree: DraftTree, out: GraphOutput, path: list[int]) -> None:
        owner, n = path[-1], self._n_tokens
        if self.lookup is not None:
            self.lookup.record(tree, self._from_lookup, path)
        if self.layout == "tree":
            owner, used = self.deepest_owner(path)
            if owner is None:
                self._pending = None
                return
            rows = mask_slot_index(n, owner, self.k, self._owners)[used:]
        elif self.layout == "linear":
            if owner != n - 1:
                self._pending = None  # the masks hang under the last draft, which was rejected
                return
            rows = np.arange(n, n + self.k)
        else:
            rows = mask_slot_index(n, owner, self.k)
        hidden = out.hidden[rows] if out.hidden is not None else None
        self._pending = (hidden, out.logits[rows])

    def deepest_owner(self, path: list[int]) -> tuple[int | None, int]:
        """The deepest node of the accepted path that carries masks, and how many of its masks the path below
        it has used up. Mask j of an owner forecasts the token j + 1 steps after it, so if the path goes m
        nodes further, masks m+1..k still forecast what follows the next root (the sampler head is told the
        real previous token): a path ending on a node without masks can still draft from an ancestor's."""
        for used, node in enumerate(reversed(path)):
            if used >= self.k:
                break
            if np.any(self._owners == node):
                return node, used
        return None, 0

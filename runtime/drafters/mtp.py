"""MTP: self-speculative decoding with a trained multi-token adapter (methods.md section 2).

Each step is ONE graph call. Its token nodes are the root and a chain of drafts; its SLOT nodes are the
adapter's learned masks (gate 1: the gated LoRA is on there, off at token nodes, so every token node's
logits and K/V are exactly the base model's and verification stays lossless):

    linear     [x0, d1..dm | k masks after dm]              a rejection leaves no masks under the accepted
                                                            node: the next step drafts nothing
    quadratic  [x0, d1..dm | k masks after EVERY node]      (m+1)(k+1) slots; whatever prefix is accepted,
                                                            the masks under its last node give k fresh drafts

The drafts of the next step come from the masks under the deepest accepted node: through the sampler head
(each conditioned on the previous draft, the first on the new root), or the masks' plain logits (argmax)
when the adapter has no sampler head or `sampler=False`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..engine import Engine
from ..graphs import GraphOutput
from ..mtp_head import SamplerHead, learned_masks, mtp_extras
from ..tree import SLOT, DraftTree
from ..tree_build import attach_mask_slots, mask_slot_index

LAYOUTS = ("linear", "quadratic")


def linear_tree(tokens: np.ndarray, k: int) -> DraftTree:
    """A chain of token nodes with a chain of k SLOT nodes under its last node."""
    n = tokens.shape[0]
    parents = np.arange(-1, n + k - 1)
    return DraftTree(np.concatenate([tokens, np.full(k, SLOT)]), parents)


class MtpDrafter:
    name = "mtp"

    def __init__(self, engine: Engine, mtp_layout: str = "quadratic", masks: int | None = None,
                 sampler: bool = True, candidates: int = 64) -> None:
        extras = mtp_extras(engine)
        if mtp_layout not in LAYOUTS:
            raise ValueError(f"unknown MTP layout {mtp_layout!r}: choose linear or quadratic")
        trained_k = int(extras["k"])
        self.k = trained_k if masks is None else masks
        if not 1 <= self.k <= trained_k:
            raise ValueError(f"the adapter was trained with k = {trained_k} masks: use --masks 1..{trained_k}")
        self.layout = mtp_layout
        self.masks = learned_masks(engine)[: self.k]
        self.lora_on_slots = bool(extras.get("rank"))  # read by generate(): gate 1 at the mask slots
        self.head = SamplerHead(engine, candidates) if sampler and extras.get("sampler") else None
        need = (self.k + 1) ** 2 if mtp_layout == "quadratic" else 2 * self.k + 1
        if need > engine.graphs.max_width:
            raise ValueError(f"the {mtp_layout} layout with k = {self.k} needs {need} slots, the widest graph has "
                             f"{engine.graphs.max_width}: re-export with a wider --decode-widths or use fewer --masks")
        self.settings = {"drafter": self.name, "mtp_layout": mtp_layout, "masks": self.k,
                         "sampler": self.head is not None, "candidates": candidates, "lora_rank": extras.get("rank")}
        self._pending: tuple[np.ndarray | None, np.ndarray] | None = None  # (hidden, logits) of the next masks
        self._n_tokens = 1

    def start(self, engine: Engine, prompt_ids: Sequence[int], prefill_logits: np.ndarray) -> None:
        self._pending = None

    def drafts(self, root: int) -> list[int]:
        if self._pending is None:
            return []
        hidden, logits = self._pending
        if self.head is not None and hidden is not None:
            return self.head.draft(root, hidden, logits)
        return [int(np.argmax(row)) for row in logits]

    def propose(self, context_ids: Sequence[int], root: int) -> tuple[DraftTree, np.ndarray]:
        tokens = np.array([root, *self.drafts(root)], dtype=np.int64)
        self._n_tokens = n = tokens.shape[0]
        if self.layout == "linear":
            return linear_tree(tokens, self.k), self.masks.copy()
        tree = attach_mask_slots(tokens, np.arange(-1, n - 1), self.k)
        return tree, np.tile(self.masks, (n, 1))

    def observe(self, tree: DraftTree, out: GraphOutput, path: list[int]) -> None:
        owner, n = path[-1], self._n_tokens
        if self.layout == "linear" and owner != n - 1:
            self._pending = None  # the masks hang under the last draft, which was rejected
            return
        rows = np.arange(n, n + self.k) if self.layout == "linear" else mask_slot_index(n, owner, self.k)
        hidden = out.hidden[rows] if out.hidden is not None else None
        self._pending = (hidden, out.logits[rows])

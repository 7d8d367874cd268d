"""Lossless verification of a draft tree against the model's own choices.

Walk from the root: the model chooses the next token from the current node's logits (argmax, or a
sample); if a child of the node carries exactly that token, the child is accepted and the walk goes on;
otherwise the chosen token is the step's correction ("bonus") token and the walk ends. Every emitted
token is therefore what the model itself chose given the accepted prefix: greedy output equals plain
greedy decoding, and sampled output has exactly the model's distribution (each token is a fresh draw from
the model's conditional; drafts only decide how many draws one graph call can serve).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .tree import SLOT, DraftTree


def verify_tree(tree: DraftTree, logits: np.ndarray, choose: Callable[[np.ndarray], int],
                trusted: int | None = None) -> tuple[list[int], int]:
    """Return (accepted node indices starting with the root, the next token chosen after the last of them).

    trusted: only rows [0, trusted) are read (default all). A matching node beyond them is not accepted: its
    token, which a trusted row chose, is returned as the next token, and no choice is made from its row, so
    sampling draws exactly as plain decoding does."""
    trusted = len(tree) if trusted is None else trusted
    path = [0]
    node = 0
    while True:
        target = choose(logits[node])
        children = tree.children(node)
        match = children[(tree.tokens[children] == target) & (tree.tokens[children] != SLOT)]
        if match.size == 0 or match[0] >= trusted:
            return path, target
        node = int(match[0])
        path.append(node)


def accepted_tokens(tree: DraftTree, path: list[int]) -> np.ndarray:
    """The draft tokens a path accepts (the root was emitted by the previous step)."""
    return tree.tokens[np.asarray(path[1:], dtype=np.int64)]

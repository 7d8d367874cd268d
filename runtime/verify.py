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


def untrusted_extension(tree: DraftTree, logits: np.ndarray, path: list[int], next_token: int,
                        trusted: int) -> tuple[list[int], list[int]]:
    """Where the verifier stopped at a matching node beyond the trusted rows: the greedy path the untrusted
    rows accept from that node on (node indices) and the tokens those rows choose, the last one its bonus.

    Such a node (a sibling of the leading chain, whose keys sit at another cache column than plain decoding
    would put them) carries `next_token`, so the loop emits it as the next root anyway; its untrusted rows say,
    almost always rightly, what follows. Those tokens are drafts, not output: the next block leads with them
    and verifies them on trusted rows (runtime/generate.py). Argmax, so that no sample is drawn from a row
    plain decoding would not compute. ([], []) when the walk did not stop at an untrusted match."""
    children = tree.children(path[-1])
    match = children[(tree.tokens[children] == next_token) & (children >= trusted)]
    if match.size == 0:
        return [], []
    nodes, tokens = [int(match[0])], []
    while True:
        tokens.append(int(np.argmax(logits[nodes[-1]])))
        children = tree.children(nodes[-1])
        match = children[tree.tokens[children] == tokens[-1]]
        if match.size == 0:
            return nodes, tokens
        nodes.append(int(match[0]))

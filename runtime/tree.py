"""Draft trees: tokens + parent indices, and the one pure function that lays a tree out for a graph call.

A tree is rooted at the last committed token (not yet in the KV cache). Plain decoding is a tree of one
node. Every drafter produces a `DraftTree`; the engine never needs to know which drafter made it.

Nodes whose token is `SLOT` carry no token: their embedding is supplied by the drafter (a mask slot of
ESP, a learned forecast embedding). A chain of k slots hanging under node b is exactly ESP's "k masks
after b": each sees b's ancestors, the earlier slots of its chain and itself, at positions pos(b)+1..k.
The verifier walks only through token nodes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

SLOT = -1  # token id of a node whose embedding the drafter supplies


@dataclass(frozen=True)
class DraftTree:
    tokens: np.ndarray  # (n,) int64; tokens[0] is the root
    parents: np.ndarray  # (n,) int64; parents[0] == -1 and 0 <= parents[i] < i

    def __post_init__(self) -> None:
        object.__setattr__(self, "tokens", np.asarray(self.tokens, dtype=np.int64))
        object.__setattr__(self, "parents", np.asarray(self.parents, dtype=np.int64))
        if self.tokens.shape != self.parents.shape or self.tokens.ndim != 1:
            raise ValueError(f"tokens {self.tokens.shape} and parents {self.parents.shape} must be equal 1-D shapes")
        validate_parents(self.parents)
        if self.tokens[0] == SLOT:
            raise ValueError("the root of a draft tree must be a real token")

    @classmethod
    def single(cls, token: int) -> DraftTree:
        return cls(np.array([token]), np.array([-1]))

    def __len__(self) -> int:
        return int(self.tokens.shape[0])

    def children(self, node: int) -> np.ndarray:
        return np.flatnonzero(self.parents == node)


@dataclass(frozen=True)
class TreeLayout:
    """What a graph call needs from a tree of n nodes.

    visible[i, j]: node i attends to node j (j is i or one of its ancestors).
    depth[i]:      distance from the root; the node's position is n_past + depth[i].
    paths:         node indices of every root-to-leaf path, leaves in index order.
    """

    visible: np.ndarray  # (n, n) bool
    depth: np.ndarray  # (n,) int64
    paths: tuple[tuple[int, ...], ...]


def validate_parents(parents: np.ndarray) -> None:
    parents = np.asarray(parents)
    if parents.ndim != 1 or parents.shape[0] == 0:
        raise ValueError("a tree needs at least a root")
    if parents[0] != -1:
        raise ValueError(f"parents[0] must be -1 (the root), got {parents[0]}")
    index = np.arange(parents.shape[0])
    bad = np.flatnonzero((parents[1:] < 0) | (parents[1:] >= index[1:])) + 1
    if bad.size:
        i = int(bad[0])
        raise ValueError(f"parents[{i}] = {parents[i]}: each node's parent must be an earlier node (0 <= p < {i})")


def node_depths(parents: np.ndarray) -> np.ndarray:
    """(n,) distance of every node from the root, for parents in topological order (parents[0] = -1)."""
    depth = np.zeros(len(parents), dtype=np.int64)
    for i in range(1, len(parents)):  # small trees (tens of nodes): a plain loop reads best
        depth[i] = depth[parents[i]] + 1
    return depth


def tree_layout(parents: np.ndarray) -> TreeLayout:
    """Attention rows, depths and root-to-leaf paths of the tree given by `parents` (topologically ordered).

    Example, parents = [-1, 0, 0, 1] (root r, children a and b, c under a):

        visible   r a b c      depth   paths
          r       ● ○ ○ ○      0       (0, 1, 3)
          a       ● ● ○ ○      1       (0, 2)
          b       ● ○ ● ○      1
          c       ● ● ○ ●      2
    """
    parents = np.asarray(parents, dtype=np.int64)
    validate_parents(parents)
    n = parents.shape[0]
    visible = np.zeros((n, n), dtype=bool)
    visible[0, 0] = True
    for i in range(1, n):  # parents come first, so each row extends its parent's finished row
        visible[i] = visible[parents[i]]
        visible[i, i] = True
    has_child = np.zeros(n, dtype=bool)
    has_child[parents[1:]] = True
    paths = tuple(tuple(int(j) for j in np.flatnonzero(visible[leaf])) for leaf in np.flatnonzero(~has_child))
    return TreeLayout(visible=visible, depth=node_depths(parents), paths=paths)

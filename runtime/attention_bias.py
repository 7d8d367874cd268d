"""The `attention_bias` and `cache_slots` inputs of a graph call (runtime/contract.py).

A block of n slots at n_past in a graph of width N: real row i takes cache column n_past + i and sees the
committed columns [0, n_past) and the columns of the nodes `visible[i]` names; padding rows [n, N) all take
the first free column n_past + n and see only it (so their softmax stays finite), and no real row sees it.
The bias is additive, (1, 1, N, C): 0 = visible, the mask value = hidden.

`block_inputs` builds both from scratch (the specification). `CachedAttentionBias` (ESP's cached-mask
optimisation) keeps one buffer per graph and rewrites only what changed since its last call: the cache columns
and rows that opened or closed, and the block's small square, which moves with n_past; tests/test_trees.py
checks it against `block_inputs`.
"""

from __future__ import annotations

import numpy as np


def pad_column(n_past: int, n: int, width: int, context: int) -> int | None:
    """The column padding rows take (n_past + n), None without padding; ValueError when the block cannot fit."""
    if n_past + n > context or (n < width and n_past + n >= context):
        raise ValueError(f"a block of {n} slots at position {n_past} in a graph of width {width} needs "
                         f"{n_past + n + (n < width)} of the {context} cache columns")
    return n_past + n if n < width else None


def cache_slots(n_past: int, n: int, width: int, context: int) -> np.ndarray:
    """(1, N) int64: n_past + i for the n real rows, the pad column for the rest."""
    pad = pad_column(n_past, n, width, context)
    slots = np.full((1, width), pad if pad is not None else 0, dtype=np.int64)
    slots[0, :n] = np.arange(n_past, n_past + n)
    return slots


def block_inputs(n_past: int, visible: np.ndarray, width: int, context: int,
                 mask_value: float) -> tuple[np.ndarray, np.ndarray]:
    """(attention_bias (1, 1, N, C) float32, cache_slots (1, N) int64) of a block whose n rows see `visible` (n, n)."""
    n = visible.shape[0]
    slots = cache_slots(n_past, n, width, context)
    bias = np.full((1, 1, width, context), mask_value, dtype=np.float32)
    bias[0, 0, :n, :n_past] = 0.0
    bias[0, 0, :n, n_past: n_past + n][visible] = 0.0
    bias[0, 0, n:, slots[0, n:]] = 0.0
    return bias, slots


class CachedAttentionBias:
    """One reusable bias buffer for a graph of `width` slots; `fill` returns (bias, cache_slots), the bias updated
    in place."""

    def __init__(self, width: int, context: int, mask_value: float) -> None:
        self.width, self.context, self.mask_value = width, context, np.float32(mask_value)
        self.buffer = np.full((1, 1, width, context), self.mask_value, dtype=np.float32)
        self.rows_open = 0  # rows [0, rows_open) see cache columns [0, cols_open)
        self.cols_open = 0
        self.block: tuple[int, np.ndarray] | None = None  # (first column, visible) of the square written last
        self.pad: int | None = None  # the padding rows' open column

    def fill(self, n_past: int, visible: np.ndarray, key: object = None) -> tuple[np.ndarray, np.ndarray]:
        """`key` is accepted for callers that identify tree shapes; the square is rewritten every call (n x n)."""
        slots = cache_slots(n_past, visible.shape[0], self.width, self.context)
        bias = self.buffer[0, 0]
        if self.block is not None:  # close last call's square and pad column first: they lie beyond its n_past
            start, old = self.block
            bias[: old.shape[0], start: start + old.shape[0]] = self.mask_value
        if self.pad is not None:
            bias[self.rows_open:, self.pad] = self.mask_value
        self._open_cache(n_past, visible.shape[0])
        n = visible.shape[0]
        bias[:n, n_past: n_past + n][visible] = 0.0
        self.block = (n_past, visible)
        self.pad = int(slots[0, n]) if n < self.width else None
        if self.pad is not None:
            bias[n:, self.pad] = 0.0
        return self.buffer, slots

    def _open_cache(self, n_past: int, n: int) -> None:
        """Rows [0, n) see columns [0, n_past), the other rows none of them."""
        cache = self.buffer[0, 0]
        if n_past < self.cols_open:
            cache[: self.rows_open, n_past: self.cols_open] = self.mask_value
            self.cols_open = n_past
        if n > self.rows_open:
            cache[self.rows_open: n, : self.cols_open] = 0.0
        elif n < self.rows_open:
            cache[n: self.rows_open, : self.cols_open] = self.mask_value
        self.rows_open = n
        if n_past > self.cols_open:
            cache[:n, self.cols_open: n_past] = 0.0
            self.cols_open = n_past

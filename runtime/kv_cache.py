"""The host-owned, fixed-size KV cache: per layer one (1, kv_heads, C, head_dim) buffer plus `n_past`.

The graphs read the buffers whole (no copy) and return only the new rows; the host commits the rows of
the accepted slots by gathering them into [n_past, n_past + a).

Context buckets: a bundle may hold graphs for smaller contexts too (e.g. 256 / 512 / 1024), which read a
smaller cache. The cache then keeps one buffer set per bucket and works in the smallest that holds what it
must (`capacity`); `reserve` moves it up a bucket with one copy of the n_past filled rows (at most once per
bucket and sequence), `reset` moves it back down for free.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .contract import past_key_name, past_value_name


class ContextOverflowError(RuntimeError):
    """The sequence would outgrow the bundle's context length."""


class KVCache:
    def __init__(self, num_layers: int, num_kv_heads: int, context: int, head_dim: int,
                 buckets: Sequence[int] = ()) -> None:
        if any(not 1 <= b <= context for b in buckets):
            raise ValueError(f"context buckets must lie in [1, {context}], got {sorted(buckets)}")
        self.context = context
        self.buckets = sorted({*buckets, context})
        # np.zeros pages are only touched when written: a bucket the sequence never reaches costs no memory
        self._buffers = {c: ([np.zeros((1, num_kv_heads, c, head_dim), np.float32) for _ in range(num_layers)],
                             [np.zeros((1, num_kv_heads, c, head_dim), np.float32) for _ in range(num_layers)])
                         for c in self.buckets}
        self.capacity = self.buckets[0]  # positions the current buffers hold: the graphs of this context run
        self.keys, self.values = self._buffers[self.capacity]
        self.n_past = 0

    @property
    def free(self) -> int:
        return self.context - self.n_past

    def reset(self) -> None:
        # stale rows beyond n_past are masked out by the attention bias, so zeroing is not needed
        self.n_past = 0
        self._use(self.buckets[0], copy_rows=0)

    def reserve(self, count: int) -> None:
        """Make the current buffers hold `count` more positions (as far as the context allows): move up to the
        smallest bucket that does, copying the n_past filled rows once."""
        needed = min(self.n_past + count, self.context)
        if needed > self.capacity:
            self._use(next(c for c in self.buckets if c >= needed), copy_rows=self.n_past)

    def _use(self, bucket: int, copy_rows: int) -> None:
        if bucket == self.capacity:
            return
        keys, values = self._buffers[bucket]
        rows = min(copy_rows, self.capacity, bucket)  # n_past set by hand (measurements) may exceed the buffers
        for old, new in zip(self.keys + self.values, keys + values, strict=True):
            new[:, :, :rows] = old[:, :, :rows]
        self.capacity, self.keys, self.values = bucket, keys, values

    def truncate(self, n_past: int) -> None:
        """Forget everything after the first `n_past` positions (e.g. to reuse a shared chat prefix)."""
        if not 0 <= n_past <= self.n_past:
            raise ValueError(f"cannot truncate to {n_past}: the cache holds {self.n_past} positions")
        self.n_past = n_past

    def graph_inputs(self) -> dict[str, np.ndarray]:
        inputs = {}
        for layer, (k, v) in enumerate(zip(self.keys, self.values, strict=True)):
            inputs[past_key_name(layer)] = k
            inputs[past_value_name(layer)] = v
        return inputs

    def ensure_room(self, needed: int) -> None:
        if needed > self.free:
            raise ContextOverflowError(
                f"the sequence needs {self.n_past + needed} positions but the bundle's context is {self.context}: "
                "shorten the prompt or max_new_tokens, or export with a larger --context"
            )

    def commit_accepted_kv(self, new_keys: Sequence[np.ndarray], new_values: Sequence[np.ndarray],
                           slots: Sequence[int], rows_in_cache: int = 0) -> None:
        """Append the K/V rows of block slots `slots` (in order) at [n_past, n_past + len(slots)).

        rows_in_cache: the block's first rows the graph already wrote at columns n_past + i of the current
        buffers (GraphOutput.rows_in_cache); accepted slots that are such rows at their own column are not copied
        (plain decoding and a drafted chain copy nothing)."""
        slots = np.asarray(slots, dtype=np.int64)
        count = int(slots.shape[0])
        self.ensure_room(count)
        capacity = self.capacity
        self.reserve(count)
        start, end = self.n_past, self.n_past + count
        placed = min(count, rows_in_cache) if self.capacity == capacity else 0  # moved up: those rows stayed behind
        mismatch = np.flatnonzero(slots[:placed] != np.arange(placed))
        placed = int(mismatch[0]) if mismatch.size else placed
        if placed < count:
            rest = slots[placed:]
            for cache_k, cache_v, k, v in zip(self.keys, self.values, new_keys, new_values, strict=True):
                cache_k[:, :, start + placed:end] = k[:, :, rest]
                cache_v[:, :, start + placed:end] = v[:, :, rest]
        self.n_past = end

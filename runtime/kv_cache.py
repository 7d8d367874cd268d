"""The host-owned, fixed-size KV cache: per layer one (1, kv_heads, C, head_dim) buffer plus `n_past`.

The graphs read the buffers whole (no copy) and return only the new rows; the host commits the rows of
the accepted slots by gathering them into [n_past, n_past + a).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .contract import past_key_name, past_value_name


class ContextOverflowError(RuntimeError):
    """The sequence would outgrow the bundle's context length."""


class KVCache:
    def __init__(self, num_layers: int, num_kv_heads: int, context: int, head_dim: int) -> None:
        self.context = context
        shape = (1, num_kv_heads, context, head_dim)
        self.keys = [np.zeros(shape, dtype=np.float32) for _ in range(num_layers)]
        self.values = [np.zeros(shape, dtype=np.float32) for _ in range(num_layers)]
        self.n_past = 0

    @property
    def free(self) -> int:
        return self.context - self.n_past

    def reset(self) -> None:
        # stale rows beyond n_past are masked out by the attention bias, so zeroing is not needed
        self.n_past = 0

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
                           slots: Sequence[int]) -> None:
        """Append the K/V rows of block slots `slots` (in order) at [n_past, n_past + len(slots))."""
        slots = np.asarray(slots, dtype=np.int64)
        count = int(slots.shape[0])
        self.ensure_room(count)
        start, end = self.n_past, self.n_past + count
        for cache_k, cache_v, k, v in zip(self.keys, self.values, new_keys, new_values, strict=True):
            cache_k[:, :, start:end] = k[:, :, slots]
            cache_v[:, :, start:end] = v[:, :, slots]
        self.n_past = end

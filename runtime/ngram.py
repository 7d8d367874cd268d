"""Prompt lookup: continuations of the latest earlier occurrences of the context's last n tokens.

Pure numpy over the token history (prompt + generated text); no model involved. The longest n (from
`max_ngram` down to `min_ngram`) that occurs earlier wins; its matches are taken newest first, and
identical continuations are kept once.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view


def ngram_continuations(context: Sequence[int] | np.ndarray, max_ngram: int = 3, min_ngram: int = 1,
                        length: int = 8, max_matches: int = 1) -> list[np.ndarray]:
    """Up to `max_matches` distinct continuations (each 1..`length` tokens), newest match first."""
    return ngram_match(context, max_ngram, min_ngram, length, max_matches)[1]


def ngram_match(context: Sequence[int] | np.ndarray, max_ngram: int = 3, min_ngram: int = 1,
                length: int = 8, max_matches: int = 1) -> tuple[int, list[np.ndarray]]:
    """(n, continuations): the n-gram length that matched (0: none) and its continuations, as above."""
    if not 1 <= min_ngram <= max_ngram:
        raise ValueError(f"n-gram sizes must satisfy 1 <= min_ngram <= max_ngram, got {min_ngram}, {max_ngram}")
    ctx = np.asarray(context, dtype=np.int64)
    for n in range(min(max_ngram, ctx.size - 1), min_ngram - 1, -1):
        # windows that start at i and leave at least one token after them (so the suffix itself is excluded)
        windows = sliding_window_view(ctx[:-1], n)
        starts = np.flatnonzero((windows == ctx[-n:]).all(axis=1))[::-1]
        if starts.size == 0:
            continue
        found: list[np.ndarray] = []
        for start in starts:  # newest first; stops after max_matches distinct ones
            cont = ctx[start + n: start + n + length]
            if not any(cont.shape == f.shape and np.array_equal(cont, f) for f in found):
                found.append(cont)
                if len(found) == max_matches:
                    break
        return n, found
    return 0, []

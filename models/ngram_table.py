"""Count a static n-gram table (runtime/static_ngrams.py) from the model's own answers (models/distill_data.py).

For every n-gram of an answer (the last prompt tokens count as context for its first tokens, so that the usual
openings are learned), the token that followed it most often is kept where it followed at least `min_count` times
and in at least `min_share` of the n-gram's occurrences: a rarer continuation is seldom accepted, and every kept
entry costs table size and a wider call when it is drafted.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from mtpedge.runtime.static_ngrams import StaticNgrams, ngram_keys

if TYPE_CHECKING:  # not imported at run time: the CLI reads this module's defaults at start-up
    from .distill_data import DistillSample


@dataclass(frozen=True)
class NgramTableConfig:
    # in an offline simulation on 39 tuning answers, orders 2-4 at count 3 and share 0.5 gave τ 1.647; 2-6 1.656
    # at 3x the size, 3-5 1.598, count 2 1.653 at 1.5x the size (benchmarks/results/fast/README.md section 33)
    orders: tuple[int, ...] = (2, 3, 4)
    min_count: int = 3
    min_share: float = 0.5

    def __post_init__(self) -> None:
        if not self.orders or min(self.orders) < 1 or self.min_count < 1 or not 0 < self.min_share <= 1:
            raise ValueError(f"n-gram orders must be >= 1, --min-count >= 1 and --min-share in (0, 1], got orders "
                             f"{list(self.orders)}, min count {self.min_count}, min share {self.min_share}")


def _pairs(samples: Sequence[DistillSample], n: int, context: int) -> tuple[np.ndarray, np.ndarray]:
    """(keys, next ids) of every n-gram followed by an answer token."""
    keys, nexts = [], []
    for sample in samples:
        tail = sample.prompt_ids[-context:] if context else sample.prompt_ids[:0]
        tokens = np.concatenate([tail, sample.response_ids]).astype(np.int64)
        first = max(len(tail), n)  # the first answer position with n tokens before it
        if tokens.size <= first:
            continue
        windows = sliding_window_view(tokens[:-1], n)[first - n:]
        keys.append(ngram_keys(windows))
        nexts.append(tokens[first:])
    if not keys:
        return np.zeros(0, np.uint64), np.zeros(0, np.int64)
    return np.concatenate(keys), np.concatenate(nexts)


def _most_frequent(keys: np.ndarray, nexts: np.ndarray, config: NgramTableConfig) -> tuple[np.ndarray, np.ndarray]:
    """Per key, its most frequent next id, where it passes the count and share thresholds (keys sorted)."""
    pairs, counts = np.unique(np.stack([keys, nexts.astype(np.uint64)], axis=1), axis=0, return_counts=True)
    order = np.lexsort((-counts, pairs[:, 0]))  # by key, the most frequent successor first
    pairs, counts = pairs[order], counts[order]
    starts = np.flatnonzero(np.r_[True, pairs[1:, 0] != pairs[:-1, 0]])
    totals = np.add.reduceat(counts, starts)
    keep = (counts[starts] >= config.min_count) & (counts[starts] >= config.min_share * totals)
    return pairs[starts[keep], 0], pairs[starts[keep], 1].astype(np.int32)


def build_table(samples: Sequence[DistillSample], vocab: str, config: NgramTableConfig | None = None) -> StaticNgrams:
    """The table of these answers; `vocab`: the fingerprint of their tokenizer (static_ngrams.vocab_fingerprint)."""
    config = config or NgramTableConfig()
    keys, nexts = [], []
    for n in config.orders:
        kept = _most_frequent(*_pairs(samples, n, max(config.orders)), config)
        keys.append(kept[0])
        nexts.append(kept[1])
    all_keys, first = np.unique(np.concatenate(keys), return_index=True)  # a cross-order collision keeps one
    return StaticNgrams(all_keys, np.concatenate(nexts)[first], tuple(sorted(config.orders, reverse=True)), vocab)

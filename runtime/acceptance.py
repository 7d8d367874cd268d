"""Online estimates of how often a drafter's candidates are accepted, per tree depth.

rate(d) estimates P(a depth-d candidate is accepted | its parent was accepted) as
(hits + w * prior(d)) / (tries + w): a prior rate worth w tries, Laplace's (hits + 1) / (tries + 2) unless a
drafter knows better. A tree builder multiplies rates down a chain to score candidates against other sources
by estimated acceptance probability.
"""

from __future__ import annotations

import numpy as np


class DepthRates:
    def __init__(self, max_depth: int, prior: tuple[float, ...] = (0.5,), prior_weight: float = 2.0) -> None:
        """`prior`: the rates at depths 1, 2, ... before any evidence, the last repeated for deeper ones."""
        self.tries = np.zeros(max_depth + 1, dtype=np.int64)
        self.hits = np.zeros(max_depth + 1, dtype=np.int64)
        depth_prior = [prior[min(d, len(prior)) - 1] for d in range(1, max_depth + 1)]
        self.prior_hits = prior_weight * np.array([1.0, *depth_prior])
        self.prior_weight = prior_weight

    def reset(self) -> None:
        self.tries[:] = 0
        self.hits[:] = 0

    def rates(self) -> np.ndarray:
        """(max_depth + 1,) with rates[0] = 1 (the root is always accepted)."""
        rates = (self.hits + self.prior_hits) / (self.tries + self.prior_weight)
        rates[0] = 1.0
        return rates

    def chain_scores(self, length: int, discount: float = 1.0) -> np.ndarray:
        """Estimated acceptance probability of each node of a chain of `length` (cumulative product)."""
        rates = self.rates()[1: length + 1]
        return discount * np.cumprod(rates)

    def record(self, depths: np.ndarray, parent_accepted: np.ndarray, accepted: np.ndarray) -> None:
        """Count, per depth, one try where some candidate's parent was accepted and one hit where one was."""
        tried = np.unique(depths[parent_accepted])
        hit = np.unique(depths[accepted])
        tried = tried[tried < self.tries.size]
        hit = hit[hit < self.hits.size]
        self.tries[tried] += 1
        self.hits[hit] += 1

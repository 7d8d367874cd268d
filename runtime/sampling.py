"""Choosing a token from logits: greedy, or seeded sampling with temperature, top-k and top-p."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class SamplingConfig:
    temperature: float = 0.0  # 0 = greedy
    top_k: int = 0  # 0 = no limit
    top_p: float = 1.0
    seed: int | None = None

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0, got {self.top_k}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


def probabilities(logits: np.ndarray, config: SamplingConfig) -> np.ndarray:
    """The distribution sampling draws from: temperature, then top-k, then top-p (nucleus) filtering."""
    scaled = logits.astype(np.float64) / config.temperature
    if config.top_k and config.top_k < scaled.shape[-1]:
        kth = np.partition(scaled, -config.top_k)[-config.top_k]
        scaled = np.where(scaled < kth, -np.inf, scaled)
    probs = np.exp(scaled - scaled.max())
    probs /= probs.sum()
    if config.top_p < 1.0:
        order = np.argsort(-probs, kind="stable")
        cumulative = np.cumsum(probs[order])
        # keep the smallest prefix whose mass reaches top_p (the token that crosses it included)
        keep = order[: int(np.searchsorted(cumulative, config.top_p) + 1)]
        filtered = np.zeros_like(probs)
        filtered[keep] = probs[keep]
        probs = filtered / filtered.sum()
    return probs


class Sampler:
    """Greedy argmax, or a draw from `probabilities` with its own seeded generator."""

    def __init__(self, config: SamplingConfig) -> None:
        self.config = config
        self.rng = np.random.default_rng(config.seed)

    def choose(self, logits: np.ndarray) -> int:
        if self.config.greedy:
            return int(np.argmax(logits))
        probs = probabilities(logits, self.config)
        return int(self.rng.choice(probs.shape[-1], p=probs))

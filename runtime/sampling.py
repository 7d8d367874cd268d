"""Choosing a token from logits: greedy, or seeded sampling with temperature, top-k, top-p and min-p.

Every token the decode loop keeps goes through `Sampler.choose`, so that is where logits that are not numbers
(a damaged bundle's NaN) stop generation instead of becoming an empty answer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .bundle import BundleError

# The truncation a sampled run gets when it names none, and the server's temperature for a request that names
# none: llama.cpp's defaults (ollama's are top-k 40, top-p 0.9, temperature 0.8). Plain temperature sampling
# over the whole vocabulary lets one unlikely token derail an answer: SmolLM2 at temperature 0.8 answered
# "Itcakes" to "Name the capital of Japan in one word." (issue #18). Measured on 5 simple questions x 8 seeds,
# 32 tokens (benchmarks/results/sampling/on-topic-5q8s.log): answers naming the right
# answer 8/40 at temperature 1.0 without truncation (what a request naming nothing got before), 14/40 at 1.0
# with this truncation, 24/40 at 0.8 with it; greedy 5/5.
DEFAULT_TEMPERATURE = 0.8
DEFAULT_TOP_K = 40
DEFAULT_TOP_P = 0.95
DEFAULT_MIN_P = 0.05


class NonFiniteLogitsError(BundleError):
    """The model's logits hold NaN or infinity: damaged weights, or graphs that overflow."""


@dataclass(frozen=True)
class SamplingConfig:
    temperature: float = 0.0  # 0 = greedy
    top_k: int = 0  # 0 = no limit
    top_p: float = 1.0  # 1 = no limit
    seed: int | None = None
    min_p: float = 0.0  # keep tokens at least min_p times as likely as the most likely one; 0 = no limit

    def __post_init__(self) -> None:
        if not math.isfinite(self.temperature) or self.temperature < 0:
            raise ValueError(f"temperature must be a finite number >= 0, got {self.temperature}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0, got {self.top_k}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if not 0 <= self.min_p < 1:
            raise ValueError(f"min_p must be in [0, 1), got {self.min_p}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    @classmethod
    def with_defaults(cls, temperature: float, top_k: int | None = None, top_p: float | None = None,
                      min_p: float | None = None, seed: int | None = None) -> SamplingConfig:
        """The settings of a request or command: truncation left unset (None) gets the defaults above when
        sampling; greedy decoding (temperature 0) ignores truncation."""
        if temperature > 0:
            top_k = DEFAULT_TOP_K if top_k is None else top_k
            top_p = DEFAULT_TOP_P if top_p is None else top_p
            min_p = DEFAULT_MIN_P if min_p is None else min_p
        return cls(temperature=temperature, top_k=top_k or 0, top_p=1.0 if top_p is None else top_p,
                   min_p=min_p or 0.0, seed=seed)


def probabilities(logits: np.ndarray, config: SamplingConfig) -> np.ndarray:
    """The distribution sampling draws from: temperature, then top-k, top-p (nucleus) and min-p filtering."""
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
    if config.min_p > 0.0:
        probs = np.where(probs >= config.min_p * probs.max(), probs, 0.0)
        probs /= probs.sum()
    return probs


class Sampler:
    """Greedy argmax, or a draw from `probabilities` with its own seeded generator."""

    def __init__(self, config: SamplingConfig) -> None:
        self.config = config
        self.rng = np.random.default_rng(config.seed)

    def choose(self, logits: np.ndarray) -> int:
        best = int(np.argmax(logits))  # argmax returns the first NaN when there is one
        if not math.isfinite(logits[best]):
            raise NonFiniteLogitsError(
                f"the model's logits are {logits[best]} (token {best}), not numbers: the bundle's weights are "
                "damaged (check its files with `mtpedge verify BUNDLE`) or its graphs overflow; re-export it")
        if self.config.greedy:
            return best
        probs = probabilities(logits, self.config)
        return int(self.rng.choice(probs.shape[-1], p=probs))

"""Mask-slot embeddings for training-free mask-token probing (ESP, methods.md section 1).

A mask slot is an input position whose embedding is not a token's row: the runtime supplies a vector built
from the input embedding table, and the slot's output logits forecast a token further ahead. k slots
(1-3) follow each tree node; slot j forecasts the token j + 1 positions after its owner.

Initialisations (all from the input embedding table E, shape (vocab, d)):
    soft    m_j = mean of E[prompt tokens]            (the same vector for all j; the paper's default)
    hard    m_j = E[j-th of the last k prompt tokens] ("last-K")
    sample  m_j ~ N(mu, sigma^2), mu/sigma per dimension over all of E (seeded: reproducible)
    mean    m_j = mu, the mean row of E ("vocab-mean": sigma = 0; best on SmolLM2 in measurement)
    learned m_j = the j-th trained mask of the bundle's multi-token adapter (`mtpedge train-mtp`, drafters/mtp_head.py)
Online update after every committed token e: m_j <- m_j + lam * (E[e] - m_j), for every j and every init.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..tree_build import MAX_MASK_SLOTS

MASK_INITS = ("soft", "hard", "sample", "mean", "learned")


@dataclass(frozen=True)
class MaskConfig:
    init: str = "mean"
    slots: int = 1  # k: mask slots after each tree node
    update_rate: float = 0.1  # lambda of the online update; 0 freezes the masks
    seed: int = 0  # for init "sample"

    def __post_init__(self) -> None:
        if self.init not in MASK_INITS:
            raise ValueError(f"unknown mask init {self.init!r}: choose one of {', '.join(MASK_INITS)}")
        if not 1 <= self.slots <= MAX_MASK_SLOTS:
            raise ValueError(f"mask slots must be 1..{MAX_MASK_SLOTS}, got {self.slots}")
        if not 0.0 <= self.update_rate <= 1.0:
            raise ValueError(f"the mask update rate lambda must be in [0, 1], got {self.update_rate}")


def initial_masks(config: MaskConfig, table: np.ndarray, prompt_ids: Sequence[int],
                  moments: tuple[np.ndarray, np.ndarray] | None = None, learned: np.ndarray | None = None
                  ) -> np.ndarray:
    """The k mask embeddings (k, d) float32 at the start of a generation (`moments`: table_moments, if known;
    `learned`: the adapter's trained masks, for init "learned")."""
    k, d = config.slots, table.shape[1]
    prompt = np.asarray(prompt_ids, dtype=np.int64)
    if prompt.size == 0:
        raise ValueError("mask embeddings need a non-empty prompt")
    if config.init == "learned":
        if learned is None or learned.shape[0] < k or learned.shape[1] != d:
            have = "none" if learned is None else f"shape {learned.shape}"
            raise ValueError(f"mask init 'learned' needs {k} trained masks of width {d} (the bundle has {have}): "
                             "export the bundle with `mtpedge export --mtp-adapter ADAPTER.pt`")
        return np.array(learned[:k], dtype=np.float32)
    if config.init == "soft":
        row = np.asarray(table[prompt], dtype=np.float64).mean(axis=0)
        return np.broadcast_to(row, (k, d)).astype(np.float32)
    if config.init == "hard":
        last = prompt[-k:]
        last = np.concatenate([np.full(k - last.size, last[0]), last])  # a prompt shorter than k repeats its first
        return np.asarray(table[last], dtype=np.float32)
    mu, sigma = moments if moments is not None else table_moments(table)
    if config.init == "mean":
        return np.broadcast_to(mu, (k, d)).astype(np.float32)
    rng = np.random.default_rng(config.seed)
    return (mu + sigma * rng.standard_normal((k, d))).astype(np.float32)


def table_moments(table: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-dimension mean and standard deviation of the embedding table (float64, (d,) each)."""
    rows = np.asarray(table, dtype=np.float64)
    return rows.mean(axis=0), rows.std(axis=0)


def updated_masks(masks: np.ndarray, new_rows: np.ndarray, rate: float) -> np.ndarray:
    """Apply m <- m + rate * (e - m) for each row e of `new_rows` in order (closed form, no Python loop).

    After n updates: m_n = (1 - rate)^n m_0 + sum_i rate (1 - rate)^(n - i) e_i.
    """
    n = new_rows.shape[0]
    if n == 0 or rate == 0.0:
        return masks
    keep = 1.0 - rate
    weights = rate * keep ** np.arange(n - 1, -1, -1, dtype=np.float64)  # (n,): newest row weighs `rate`
    blended = weights @ np.asarray(new_rows, dtype=np.float64)  # (d,)
    return (keep**n * masks.astype(np.float64) + blended[None, :]).astype(np.float32)


class MaskEmbeddings:
    """The current k mask vectors of one generation and their online update."""

    def __init__(self, config: MaskConfig, table: np.ndarray, learned: np.ndarray | None = None) -> None:
        self.config = config
        self.table = table
        self.learned = learned
        self.masks = np.zeros((config.slots, table.shape[1]), dtype=np.float32)
        # a pass over the whole table (~0.1-0.3 s for 49k x 576): once per drafter, not per generation
        self.moments = table_moments(table) if config.init in ("sample", "mean") else None

    def start(self, prompt_ids: Sequence[int]) -> None:
        self.masks = initial_masks(self.config, self.table, prompt_ids, self.moments, self.learned)

    def observe_tokens(self, token_ids: Sequence[int]) -> None:
        rows = np.asarray(self.table[np.asarray(token_ids, dtype=np.int64)], dtype=np.float32)
        self.masks = updated_masks(self.masks, rows, self.config.update_rate)

    def for_owners(self, owners: int) -> np.ndarray:
        """Slot embeddings for `owners` nodes with k masks each, in owner-major order: (owners * k, d)."""
        return np.tile(self.masks, (owners, 1))

"""Host-side rotary embeddings: the graph takes cos/sin tables, so tree positions and rope scaling cost
nothing inside it. The PyTorch reference decoder uses the same tables, so both sides agree bit for bit."""

from __future__ import annotations

import math

import numpy as np

from .model_config import RopeConfig


def inverse_frequencies(rope: RopeConfig, head_dim: int) -> np.ndarray:
    """Per-pair rotation speeds (head_dim/2,), float64, with linear or llama3 scaling applied."""
    exponents = np.arange(0, head_dim, 2, dtype=np.float64) / head_dim
    inv_freq = 1.0 / (rope.theta**exponents)
    if rope.rope_type == "linear":
        return inv_freq / rope.factor
    if rope.rope_type == "llama3":
        # Long wavelengths are slowed by `factor`, short ones kept, the band between interpolated
        # (the scheme of Llama 3.1; same formula as transformers' `_compute_llama3_parameters`).
        low_wavelen = rope.original_max_position / rope.low_freq_factor
        high_wavelen = rope.original_max_position / rope.high_freq_factor
        wavelen = 2 * math.pi / inv_freq
        scaled = np.where(wavelen > low_wavelen, inv_freq / rope.factor, inv_freq)
        smooth = (rope.original_max_position / wavelen - rope.low_freq_factor) / (
            rope.high_freq_factor - rope.low_freq_factor
        )
        smoothed = (1 - smooth) * scaled / rope.factor + smooth * scaled
        is_medium = (wavelen >= high_wavelen) & (wavelen <= low_wavelen)
        return np.where(is_medium, smoothed, scaled)
    return inv_freq


def rope_tables(positions: np.ndarray, inv_freq: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin for each position: (1, 1, N, head_dim/2) float32, the graph's `rope_cos`/`rope_sin`."""
    angles = np.asarray(positions, dtype=np.float64)[:, None] * inv_freq[None, :]
    cos = np.cos(angles).astype(np.float32)[None, None]
    sin = np.sin(angles).astype(np.float32)[None, None]
    return cos, sin

"""Roofline estimate of one graph call: FLOPs and bytes moved, against this CPU's measured ceilings.

A call of width N over a context of C positions (the graph always attends over the whole cache, C + N keys,
masked or not) does, with P the matmul weights:

    FLOPs  = 2·N·P  +  L · 4·N·(C+N)·H·hd                    (projections + lm_head, then QKᵀ and AV)
    bytes  = P·b_w  +  L · 2·Hkv·C·hd·4                      (weights once, the whole K/V cache once)
           + N·(C+N)·4 + N·V·4 + L · 2·Hkv·N·hd·4           (mask in, logits out, new K/V out)
           + L · 2·N·H·(C+N)·4                               (attention scores written and read back)

time ≈ max(FLOPs / peak FLOP/s, bytes / bandwidth): narrow calls are bound by bytes (the weights), so they
cost about the same up to the width where FLOPs take over — the widest tree that is still nearly free.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

# bytes per weight by bundle precision; unknown precisions are estimated as float32 (and say so)
WEIGHT_BYTES = {"float32": 4.0, "float16": 2.0, "bfloat16": 2.0, "int8": 1.0, "int4": 0.5,
                # a GGUF Q4_1 block: 32 4-bit codes + a float16 scale and minimum = 20 bytes per 32 weights
                "gguf": 20 / 32, "qdq": 1.0}


def weight_bytes(precision: str) -> float:
    """Bytes per weight of a graph precision label (`int4-b32+out:int8`, `gguf-a4-down0`: by its first word)."""
    return WEIGHT_BYTES.get(precision, WEIGHT_BYTES.get(precision.split("-")[0].split("+")[0], 4.0))


@dataclass(frozen=True)
class CallCost:
    flops: float
    bytes: float

    @property
    def intensity(self) -> float:
        return self.flops / self.bytes


def matmul_weights(config) -> int:
    """Weights that a call multiplies by (the embedding lookup happens on the host)."""
    d, hd, heads, kv = config.hidden_size, config.head_dim, config.num_heads, config.num_kv_heads
    per_layer = d * heads * hd + 2 * d * kv * hd + heads * hd * d + 3 * d * config.intermediate_size
    return config.num_layers * per_layer + d * config.vocab_size


def call_cost(config, width: int, context: int, precision: str = "float32") -> CallCost:
    n, c, layers = width, context, config.num_layers
    heads, kv, hd = config.num_heads, config.num_kv_heads, config.head_dim
    p = matmul_weights(config)
    flops = 2.0 * n * p + layers * 4.0 * n * (c + n) * heads * hd
    moved = (p * weight_bytes(precision) + layers * 2 * kv * c * hd * 4 + n * (c + n) * 4 + n * config.vocab_size * 4
             + layers * 2 * kv * n * hd * 4 + layers * 2 * n * heads * (c + n) * 4)
    return CallCost(flops, float(moved))


@dataclass(frozen=True)
class Ceilings:
    flops_per_s: float  # measured float32 matmul rate
    bytes_per_s: float  # measured copy bandwidth (read + write)
    how: str

    def seconds(self, cost: CallCost) -> float:
        return max(cost.flops / self.flops_per_s, cost.bytes / self.bytes_per_s)

    def bound(self, cost: CallCost) -> str:
        return "compute" if cost.flops / self.flops_per_s > cost.bytes / self.bytes_per_s else "memory"


def measure_ceilings(repeats: int = 5, matmul_size: int = 1024, copy_mb: int = 256) -> Ceilings:
    """Best-of-`repeats` float32 GEMM rate and large-array copy bandwidth, with numpy's BLAS threads."""
    a = np.random.default_rng(0).standard_normal((matmul_size, matmul_size), dtype=np.float32)
    a @ a  # warm up the BLAS thread pool
    best = min(_timed(lambda: a @ a) for _ in range(repeats))
    flops = 2.0 * matmul_size**3 / best
    src = np.ones(copy_mb * 2**20 // 4, dtype=np.float32)
    dst = np.empty_like(src)
    np.copyto(dst, src)
    best = min(_timed(lambda: np.copyto(dst, src)) for _ in range(repeats))
    bandwidth = 2.0 * src.nbytes / best
    return Ceilings(flops, bandwidth, f"numpy float32 {matmul_size}^3 matmul and {copy_mb} MB copy, best of {repeats}")


def _timed(fn) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started

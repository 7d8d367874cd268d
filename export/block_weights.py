"""Block-quantized matrices in the layout of onnxruntime's `MatMulNBits`, and round-to-nearest quantizers.

A `BlockWeights` holds W (N outputs x K inputs) as integer codes u with one scale per block of
`block_size` inputs, dequantized as

    w[n, k] = scale[n, b] * (u[n, k] - zero) + offset[n, b]        b = k // block_size, zero = 2**(bits-1)

`zero` is MatMulNBits' default zero point (no zero-point input: its fast path). `offset` (None when all
zero) carries a per-block minimum, as in GGUF Q4_1 / Q4_K; the graph adds it as blocksum(x) @ offset,
because MatMulNBits with float zero points is 10x slower on CPU (environment.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

SUPPORTED_BITS = (4, 8)


@dataclass(frozen=True)
class BlockWeights:
    codes: np.ndarray  # (N, K) uint8, each in [0, 2**bits)
    scales: np.ndarray  # (N, K // block_size) float32
    offsets: np.ndarray | None  # (N, K // block_size) float32, or None
    bits: int
    block_size: int
    source: str  # how it was made, e.g. "gguf:Q4_1" or "rtn"

    def __post_init__(self) -> None:
        n, k = self.codes.shape
        if self.bits not in SUPPORTED_BITS:
            raise ValueError(f"MatMulNBits codes must be 4 or 8 bits, got {self.bits}")
        if k % self.block_size:
            raise ValueError(f"K = {k} is not a multiple of the block size {self.block_size}")
        blocks = (n, k // self.block_size)
        if self.scales.shape != blocks or (self.offsets is not None and self.offsets.shape != blocks):
            raise ValueError(f"scales/offsets must have shape {blocks}, got {self.scales.shape}")
        if int(self.codes.max(initial=0)) >= 1 << self.bits:
            raise ValueError(f"a code exceeds {self.bits} bits")

    @property
    def zero(self) -> int:
        return 1 << (self.bits - 1)

    @property
    def shape(self) -> tuple[int, int]:
        return self.codes.shape

    def dequantize(self) -> np.ndarray:
        """(N, K) float32, computed as the graph computes it."""
        n, k = self.codes.shape
        blocks = self.codes.reshape(n, -1, self.block_size).astype(np.float32) - self.zero
        w = blocks * self.scales[:, :, None]
        if self.offsets is not None:
            w = w + self.offsets[:, :, None]
        return w.reshape(n, k)

    def packed(self) -> np.ndarray:
        """MatMulNBits input B: (N, K // block_size, block_size * bits // 8) uint8, low nibble first."""
        n, k = self.codes.shape
        codes = self.codes.reshape(n, k // self.block_size, self.block_size)
        if self.bits == 8:
            return np.ascontiguousarray(codes)
        return np.ascontiguousarray(codes[..., 0::2] | (codes[..., 1::2] << 4)).astype(np.uint8)

    def split_blocks(self, block_size: int) -> BlockWeights:
        """The same matrix in blocks of `block_size` inputs (a divisor of ours): each block's scale and offset
        repeated over its parts, so the dequantized weights are unchanged, bit for bit. MatMulNBits' int8 kernels
        quantize the activations per weight block, so smaller blocks quantize them more finely."""
        if block_size > self.block_size or self.block_size % block_size:
            raise ValueError(f"block size {block_size} does not divide the grid's {self.block_size}")
        parts = self.block_size // block_size
        offsets = None if self.offsets is None else np.repeat(self.offsets, parts, axis=1)
        return BlockWeights(self.codes, np.repeat(self.scales, parts, axis=1), offsets, self.bits, block_size,
                            f"{self.source}/b{block_size}")

    @staticmethod
    def side_by_side(parts: Sequence[BlockWeights]) -> BlockWeights:
        """Matrices of one input (same K, bits and blocks) as one: their outputs stacked, in order."""
        first = parts[0]
        if any((p.shape[1], p.bits, p.block_size, p.offsets is None) != (first.shape[1], first.bits,
               first.block_size, first.offsets is None) for p in parts):
            raise ValueError("only matrices with the same inputs, bits, blocks and minima can stand side by side")
        offsets = None if first.offsets is None else np.concatenate([p.offsets for p in parts])
        return BlockWeights(np.concatenate([p.codes for p in parts]), np.concatenate([p.scales for p in parts]),
                            offsets, first.bits, first.block_size, "+".join(sorted({p.source for p in parts})))

    @property
    def nbytes(self) -> int:
        extra = 0 if self.offsets is None else self.offsets.nbytes
        return self.codes.size * self.bits // 8 + self.scales.nbytes + extra


def quantize_rtn(weight: np.ndarray, bits: int, block_size: int = 32) -> BlockWeights:
    """Symmetric round-to-nearest block quantization of a float (N, K) matrix (one absmax scale per block)."""
    if bits not in SUPPORTED_BITS:
        raise ValueError(f"bits must be one of {SUPPORTED_BITS}, got {bits}")
    n, k = weight.shape
    if k % block_size:
        raise ValueError(f"K = {k} is not a multiple of the block size {block_size}: choose a divisor of {k}")
    zero = 1 << (bits - 1)
    qmax = zero - 1  # symmetric: codes in [zero - qmax, zero + qmax]
    blocks = weight.astype(np.float32).reshape(n, k // block_size, block_size)
    scales = np.abs(blocks).max(axis=-1) / qmax
    safe = np.where(scales == 0, 1.0, scales)
    q = np.clip(np.rint(blocks / safe[..., None]), -qmax, qmax)
    codes = (q + zero).astype(np.uint8).reshape(n, k)
    return BlockWeights(codes, scales.astype(np.float32), None, bits, block_size, f"rtn{bits}")

"""Block-quantized matrices in the layout of onnxruntime's `MatMulNBits`, and round-to-nearest quantizers.

A `BlockWeights` holds W (N outputs x K inputs) as integer codes u with one scale per block of
`block_size` inputs, dequantized as

    w[n, k] = scale[n, b] * (u[n, k] - zero) + offset[n, b]        b = k // block_size, zero = 2**(bits-1)

`zero` is MatMulNBits' default zero point (no zero-point input: its fast path). `offset` (None when all
zero) carries a per-block minimum, as in GGUF Q4_1 / Q4_K; the graph adds it as blocksum(x) @ offset,
because MatMulNBits with float zero points is 10x slower on CPU (environment.md). Or, instead of `zero` and
`offset`, integer zero points per block (`zero_points`, MatMulNBits' zero-point input):

    w[n, k] = scale[n, b] * (u[n, k] - zero_points[n, b])

which is how `widen_to_8bit` carries a Q4_1 grid's minima inside the kernel (no correction MatMul).
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
    zero_points: np.ndarray | None = None  # (N, K // block_size) uint8 integer zero points, or None (`zero`)

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
        if self.zero_points is not None:
            if self.offsets is not None or self.zero_points.shape != blocks:
                raise ValueError(f"zero points need shape {blocks} and no offsets, got {self.zero_points.shape}")
            if int(self.zero_points.max(initial=0)) >= 1 << self.bits:
                raise ValueError(f"a zero point exceeds {self.bits} bits")

    @property
    def zero(self) -> int:
        return 1 << (self.bits - 1)

    @property
    def shape(self) -> tuple[int, int]:
        return self.codes.shape

    def dequantize(self) -> np.ndarray:
        """(N, K) float32, computed as the graph computes it."""
        n, k = self.codes.shape
        zero = self.zero if self.zero_points is None else self.zero_points[:, :, None].astype(np.float32)
        blocks = self.codes.reshape(n, -1, self.block_size).astype(np.float32) - zero
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

    def packed_zero_points(self) -> np.ndarray | None:
        """MatMulNBits input zero_points: one uint8 per block for 8 bits (4-bit zero points are not made here)."""
        if self.zero_points is None:
            return None
        if self.bits != 8:
            raise ValueError("only 8-bit grids carry integer zero points here")
        return np.ascontiguousarray(self.zero_points.astype(np.uint8).reshape(-1))

    def split_blocks(self, block_size: int) -> BlockWeights:
        """The same matrix in blocks of `block_size` inputs (a divisor of ours): each block's scale and offset
        repeated over its parts, so the dequantized weights are unchanged, bit for bit. MatMulNBits' int8 kernels
        quantize the activations per weight block, so smaller blocks quantize them more finely."""
        if block_size > self.block_size or self.block_size % block_size:
            raise ValueError(f"block size {block_size} does not divide the grid's {self.block_size}")
        parts = self.block_size // block_size
        offsets = None if self.offsets is None else np.repeat(self.offsets, parts, axis=1)
        zero_points = None if self.zero_points is None else np.repeat(self.zero_points, parts, axis=1)
        return BlockWeights(self.codes, np.repeat(self.scales, parts, axis=1), offsets, self.bits, block_size,
                            f"{self.source}/b{block_size}", zero_points)

    @staticmethod
    def side_by_side(parts: Sequence[BlockWeights]) -> BlockWeights:
        """Matrices of one input (same K, bits and blocks) as one: their outputs stacked, in order."""
        first = parts[0]
        if any(p.kind != first.kind for p in parts):
            raise ValueError("only matrices with the same inputs, bits, blocks and minima can stand side by side")
        offsets = None if first.offsets is None else np.concatenate([p.offsets for p in parts])
        zero_points = None if first.zero_points is None else np.concatenate([p.zero_points for p in parts])
        return BlockWeights(np.concatenate([p.codes for p in parts]), np.concatenate([p.scales for p in parts]),
                            offsets, first.bits, first.block_size, "+".join(sorted({p.source for p in parts})),
                            zero_points)

    @property
    def kind(self) -> tuple[int, int, int, bool, bool]:
        """What must agree for matrices to share one MatMulNBits: K, bits, block, minima, zero points."""
        return self.shape[1], self.bits, self.block_size, self.offsets is None, self.zero_points is None

    @property
    def nbytes(self) -> int:
        extra = 0 if self.offsets is None else self.offsets.nbytes
        extra += 0 if self.zero_points is None else self.zero_points.size
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


def widen_to_8bit(weights: BlockWeights) -> BlockWeights:
    """A 4-bit grid with block minima (Q4_1) as 8-bit codes with integer zero points, nearly exactly.

    w = d*(u - 8) + m = s*(q - z) with s = d/16, q = 16u + c and z = c - round(16*(m - 8d)/d): each block's
    minimum moves to the nearest multiple of d/16, a sixteenth of the grid's step (the codes are unchanged).
    MatMulNBits then applies the minimum inside its kernel, where the 4-bit grid needs a correction MatMul and Add
    after every product, and MLAS's 8-bit int8-activation kernel computes a row alike at every width on AVX2,
    where its 4-bit one-row kernel does not (benchmarks/results/fast/README.md, section 21). Blocks whose minimum
    lies outside that range take a coarser step (d/8, ... d); blocks with d = 0 are stored exactly."""
    if weights.bits != 4 or weights.offsets is None:
        raise ValueError("only 4-bit grids with block minima are widened to 8 bits")
    n, k = weights.shape
    d = weights.scales.astype(np.float64)
    base = weights.offsets.astype(np.float64) - weights.zero * d  # w = d*u + base
    scales, shift, zero_points, mults = (np.zeros(d.shape, t) for t in (np.float64, np.int64, np.int64, np.int64))
    done = d == 0  # a constant block: s = base, q = 1, z = 0 (exact)
    scales[done], shift[done] = base[done], 1
    safe = np.where(done, 1.0, d)
    for mult in (16, 8, 4, 2, 1):
        r = np.rint(mult * base / safe).astype(np.int64)
        c = np.clip(r, 0, 255 - 15 * mult)
        fits = ~done & (c - r >= 0) & (c - r <= 255)
        scales[fits], shift[fits], zero_points[fits], mults[fits] = d[fits] / mult, c[fits], c[fits] - r[fits], mult
        done |= fits
    if not done.all():
        raise ValueError(f"{int((~done).sum())} blocks have a minimum too far from their codes for 8-bit zero points")
    codes = weights.codes.reshape(n, -1, weights.block_size).astype(np.int64) * mults[..., None] + shift[..., None]
    return BlockWeights(codes.reshape(n, k).astype(np.uint8), scales.astype(np.float32), None, 8,
                        weights.block_size, f"{weights.source}/w8", zero_points.astype(np.uint8))

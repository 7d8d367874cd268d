"""A GGUF file's own quantization grid, re-expressed exactly as `BlockWeights` for `MatMulNBits`.

Why: the GGUF's weights already sit on a 4/5/6/8-bit grid. Re-quantizing their dequantized values with
another grid adds a second rounding error (69-80% top-1 agreement, environment.md); re-using the file's own
codes and scales loses nothing.

How, without hand-decoding each block layout: every supported format is affine in its integer codes within a
sub-block, w = a * r + b. gguf's own `dequantize` is used as the oracle: dequantizing the blocks with every
code set to 0 gives b, with every code set to 1 gives a + b, and r = (w - b) / a. Each result is checked:
a and b must be constant over each sub-block, r must be an integer in the format's range, and the rebuilt
matrix must equal gguf's dequantization to float32 rounding.

    format  codes  sub-block  nominal zero   MatMulNBits          per-block offset
    Q4_0    4 bit  32         8              4-bit, block 32      -
    Q4_1    4 bit  32         (minimum)      4-bit, block 32      yes
    Q4_K    4 bit  32         (minimum)      4-bit, block 32      yes
    Q5_0    5 bit  32         16             8-bit, block 32      -
    Q5_1    5 bit  32         (minimum)      8-bit, block 32      yes
    Q5_K    5 bit  32         (minimum)      8-bit, block 32      yes
    Q6_K    6 bit  16         32             8-bit, block 16      -
    Q8_0    8 bit  32         0 (signed)     8-bit, block 32      -
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, dequantize

from mtpedge.models.gguf_file import GGUFFile

from .block_weights import BlockWeights

log = logging.getLogger(__name__)

ROWS_PER_CHUNK = 4096  # bounds the oracle's temporaries (a few float32 copies of this many rows)


@dataclass(frozen=True)
class GridFormat:
    code_bytes: tuple[tuple[int, int, int], ...]  # (start, stop, byte value that makes those codes 1) per block
    sub_block: int  # elements sharing one scale (and minimum)
    zero: int  # code mapped onto MatMulNBits' zero point; the offset absorbs b + a * zero
    bits: int  # MatMulNBits code width that holds the codes
    code_range: tuple[int, int]  # valid raw codes r


Q = GGMLQuantizationType
FORMATS: dict[GGMLQuantizationType, GridFormat] = {
    Q.Q4_0: GridFormat(((2, 18, 0x11),), 32, 8, 4, (0, 15)),
    Q.Q4_1: GridFormat(((4, 20, 0x11),), 32, 8, 4, (0, 15)),
    Q.Q4_K: GridFormat(((16, 144, 0x11),), 32, 8, 4, (0, 15)),
    Q.Q5_0: GridFormat(((2, 6, 0x00), (6, 22, 0x11)), 32, 16, 8, (0, 31)),
    Q.Q5_1: GridFormat(((4, 8, 0x00), (8, 24, 0x11)), 32, 16, 8, (0, 31)),
    Q.Q5_K: GridFormat(((16, 48, 0x00), (48, 176, 0x11)), 32, 16, 8, (0, 31)),
    Q.Q6_K: GridFormat(((0, 128, 0x11), (128, 192, 0x00)), 16, 32, 8, (0, 63)),
    Q.Q8_0: GridFormat(((2, 34, 0x01),), 32, 0, 8, (-128, 127)),
}


class GridError(ValueError):
    """A GGUF tensor whose grid cannot be expressed exactly; the message names the tensor and the format."""


@dataclass(frozen=True)
class GridTensor:
    name: str  # GGUF tensor name, e.g. blk.0.attn_q.weight
    qtype: str  # e.g. Q4_1
    weights: BlockWeights  # rows in GGUF order
    row_hashes: list[bytes]  # sha1 of each dequantized float32 row: matches graph columns by content
    max_rebuild_error: float  # max |rebuilt - gguf dequantized|


def _set_codes(blocks: np.ndarray, fmt: GridFormat, one: bool) -> np.ndarray:
    out = blocks.copy()
    for start, stop, value in fmt.code_bytes:
        out[:, start:stop] = value if one else 0
    return out


def decompose(raw: np.ndarray, qtype: GGMLQuantizationType, name: str = "?") -> tuple[BlockWeights, np.ndarray]:
    """Raw GGUF rows (N, bytes per row) -> (BlockWeights, the dequantized (N, K) float32 matrix)."""
    if qtype not in FORMATS:
        raise GridError(f"{name}: GGUF type {qtype.name} has no exact MatMulNBits mapping "
                        f"(supported: {', '.join(f.name for f in FORMATS)})")
    fmt = FORMATS[qtype]
    block_elems, block_bytes = GGML_QUANT_SIZES[qtype]
    n = raw.shape[0]
    rows = np.ascontiguousarray(raw)
    blocks = rows.reshape(-1, block_bytes)
    # gguf dequantizes row by row: whole rows, not one "row" per block (which made a 576 x 1536 matrix ~20x slower)
    w = dequantize(rows, qtype).reshape(n, -1)
    b = dequantize(_set_codes(blocks, fmt, one=False).reshape(rows.shape), qtype).reshape(n, -1)
    a = dequantize(_set_codes(blocks, fmt, one=True).reshape(rows.shape), qtype).reshape(n, -1) - b
    k = w.shape[1]
    sub = lambda x: x.reshape(n, k // fmt.sub_block, fmt.sub_block)  # noqa: E731
    a_sub, b_sub = sub(a)[..., 0], sub(b)[..., 0]
    if not (np.array_equal(sub(a), np.broadcast_to(a_sub[..., None], sub(a).shape))
            and np.array_equal(sub(b), np.broadcast_to(b_sub[..., None], sub(b).shape))):
        raise GridError(f"{name}: {qtype.name} scales are not constant over {fmt.sub_block}-element sub-blocks")
    safe = np.where(a_sub == 0, 1.0, a_sub)[..., None]
    r = np.rint((sub(w) - b_sub[..., None]) / safe)
    r = np.where(a_sub[..., None] == 0, fmt.zero, r)  # a zero scale: every code gives b
    lo, hi = fmt.code_range
    if r.min() < lo or r.max() > hi:
        raise GridError(f"{name}: derived {qtype.name} codes fall outside [{lo}, {hi}]")
    zero_point = 1 << (fmt.bits - 1)
    codes = (r + (zero_point - fmt.zero)).astype(np.uint8).reshape(n, k)
    offsets = (b_sub + a_sub * fmt.zero).astype(np.float32)
    weights = BlockWeights(codes, a_sub.astype(np.float32), offsets if np.any(offsets) else None,
                           fmt.bits, fmt.sub_block, f"gguf:{qtype.name}")
    return weights, w


def read_grid_tensors(path: str | Path) -> dict[str, GridTensor]:
    """Every 2-D quantized tensor of a GGUF file, decomposed (F32/F16 tensors are skipped: nothing to keep)."""
    gguf = GGUFFile.open(path)
    out: dict[str, GridTensor] = {}
    for tensor in gguf.tensors.values():
        qtype = tensor.qtype
        if qtype in (Q.F32, Q.F16, Q.BF16) or len(tensor.shape) != 2:
            continue
        raw = gguf.raw(tensor.name)
        parts, hashes, error = [], [], 0.0
        for start in range(0, raw.shape[0], ROWS_PER_CHUNK):
            weights, w = decompose(raw[start:start + ROWS_PER_CHUNK], qtype, tensor.name)
            error = max(error, float(np.abs(weights.dequantize() - w).max()))
            hashes += [hashlib.sha1(row.tobytes()).digest() for row in w]
            parts.append(weights)
        first = parts[0]
        merged = BlockWeights(
            np.concatenate([p.codes for p in parts]), np.concatenate([p.scales for p in parts]),
            None if all(p.offsets is None for p in parts) else np.concatenate(
                [p.offsets if p.offsets is not None else np.zeros_like(p.scales) for p in parts]),
            first.bits, first.block_size, first.source)
        scale = max(float(np.abs(merged.scales).max()), 1e-30)
        if error > 1e-5 * scale * (1 << first.bits):
            raise GridError(f"{tensor.name}: rebuilding {qtype.name} misses gguf's values by {error:.2e}")
        out[tensor.name] = GridTensor(tensor.name, qtype.name, merged, hashes, error)
        log.debug("%s: %s -> %d-bit blocks of %d, rebuild error %.1e", tensor.name, qtype.name,
                  first.bits, first.block_size, error)
    return out

"""Weight products on mtpedge's own CPU kernel: MatMulNBits (+ its block-minimum correction) -> BlockMatMul.

onnxruntime's MatMulNBits computes each row of a call on its own (a 16-row call of SmolLM2 costs ~3x a one-row
call on the CPUs measured) and cannot apply a Q4_1 block minimum itself, so the graph adds it with a second
product (13.5% of a one-row call: benchmarks/results/fast/README.md sections 18 and 29). `com.mtpedge.BlockMatMul`
(runtime/kernels/block_matmul.c) takes the same codes, scales and minima, quantizes the activations per block
as MatMulNBits does at accuracy level 4, shares each unpacked weight block across the rows of a call, and
applies the minimum in the same pass. The codes are re-laid in 16-column tiles (`tile_codes`).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from mtpedge.runtime.kernels import DOMAIN

from .block_weights import BlockWeights

OP = "BlockMatMul"
TILE = 16  # output columns per tile (one 512-bit register of float32)


def tile_codes(codes: np.ndarray, bits: int, block: int) -> np.ndarray:
    """(N, K) codes in the kernel's layout (flat uint8): per tile of 16 columns and block, groups of 4 inputs,
    each group as [16 columns][4 inputs]; 4-bit codes put group h in the low nibbles and group h + G/2 in the
    high nibbles of one such [16][4] byte array (G = block / 4 groups)."""
    n, k = codes.shape
    groups = block // 4
    # (tile, column, block, group, input) -> (tile, block, group, column, input)
    tiled = codes.reshape(n // TILE, TILE, k // block, groups, 4).transpose(0, 2, 3, 1, 4).astype(np.uint8)
    if bits == 8:
        return np.ascontiguousarray(tiled).reshape(-1)
    half = groups // 2
    return np.ascontiguousarray(tiled[:, :, :half] | (tiled[:, :, half:] << 4)).reshape(-1)


def tile_table(table: np.ndarray) -> np.ndarray:
    """(N, K / block) per-block floats -> [tile][block][16 columns], flat, in the table's own float type."""
    n, blocks = table.shape
    return np.ascontiguousarray(table.reshape(n // TILE, TILE, blocks).transpose(0, 2, 1)).reshape(-1)


def half_tables(weights: BlockWeights) -> tuple[np.ndarray, np.ndarray | None] | None:
    """(scales, minima) as float16 when they give back the float32 tables exactly (a GGUF grid's d and m are
    float16; the kernel computes offset = m + zero * d in float32), else None."""
    scales = weights.scales.astype(np.float16)
    if not np.array_equal(scales.astype(np.float32), weights.scales):
        return None
    if weights.offsets is None:
        return scales, None
    minima = (weights.offsets - np.float32(weights.zero) * weights.scales).astype(np.float16)
    rebuilt = minima.astype(np.float32) + np.float32(weights.zero) * scales.astype(np.float32)
    return (scales, minima) if np.array_equal(rebuilt, weights.offsets) else None


def block_matmul_node(x: str, y: str, weights: BlockWeights, prefix: str,
                      allow_half: bool = True) -> tuple[onnx.NodeProto, list[onnx.TensorProto]]:
    """One BlockMatMul computing y = x @ W^T for `weights`, and its initializers (named after `prefix`): float16
    tables (BlockMatMulF16: 20 bytes per 32 4-bit weights instead of 24) where they are exact."""
    n, k = weights.shape
    half = half_tables(weights) if allow_half else None
    scales, offsets = half if half else (weights.scales, weights.offsets)
    inits = [numpy_helper.from_array(tile_codes(weights.codes, weights.bits, weights.block_size), f"{prefix}.tiled"),
             numpy_helper.from_array(tile_table(scales), f"{prefix}.tscales")]
    inputs = [x, inits[0].name, inits[1].name]
    if offsets is not None:
        inits.append(numpy_helper.from_array(tile_table(offsets), f"{prefix}.t{'minima' if half else 'offsets'}"))
        inputs.append(inits[2].name)
    node = helper.make_node(OP + ("F16" if half else ""), inputs, [y], name=f"{prefix}.block_matmul", domain=DOMAIN,
                            K=k, N=n, bits=weights.bits, block_size=weights.block_size, zero=weights.zero)
    return node, inits

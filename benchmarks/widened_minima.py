"""Q4_1's block minimum inside MatMulNBits: the grid widened to 8-bit codes with integer zero points (section 21).

    python benchmarks/widened_minima.py [--threads 1] [--rounds 60]

For SmolLM2's two MLP shapes (576 -> 1536, 1536 -> 576), one random Q4_1 grid each, interleaved call by call:
  q4+min   the fast bundle's form: 4-bit codes, int8 activations, the minimum by ReduceSum + MatMul + Add
  w8-zp    the same codes times 16 as 8-bit codes, the minimum in an integer zero point (export/block_weights.py
           at commit c3bb06c: `widen_to_8bit`), int8 activations
  float    float32 MatMul of the grid
Prints the median microseconds per call at widths 1/4/16, whether row 0 of a 16-row call equals the one-row call
bit for bit, and each form's error against the exact product x @ grid (16 rows of heavy-tailed activations).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from gguf import GGMLQuantizationType, quants
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, str(Path(__file__).resolve().parent))
from nbits_kernels import _matmul_model, _nbits  # noqa: E402

from mtpedge.export.block_weights import BlockWeights  # noqa: E402
from mtpedge.export.gguf_grid import decompose  # noqa: E402
from mtpedge.export.matmul_nbits import MS_DOMAIN  # noqa: E402

WIDTHS = (1, 4, 16)


def widen_to_8bit(grid: BlockWeights) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(codes, scales, zero points): w = d*u + m as (d/16) * (16u - z), z = -round(16 m / d); the minimum moves
    by at most d/32. (Random N(0, 0.05) blocks always fit; the library version took coarser steps otherwise.)"""
    n, k = grid.shape
    base = grid.offsets - grid.zero * grid.scales  # w = d*u + base
    zero_points = -np.rint(16 * base / grid.scales)
    if zero_points.min() < 0 or zero_points.max() > 255:
        raise ValueError("a block's minimum does not fit an 8-bit zero point at a sixteenth of its step")
    return (16 * grid.codes).astype(np.uint8), grid.scales / 16, zero_points.astype(np.uint8)


def zero_point_model(k: int, n: int, codes: np.ndarray, scales: np.ndarray, zero_points: np.ndarray) -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, "T", k])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, "T", n])
    inits = [numpy_helper.from_array(np.ascontiguousarray(codes.reshape(n, k // 32, 32)), "codes"),
             numpy_helper.from_array(scales.astype(np.float32).reshape(-1), "scales"),
             numpy_helper.from_array(zero_points.reshape(-1), "zero_points")]
    node = helper.make_node("MatMulNBits", ["x", "codes", "scales", "zero_points"], ["y"], domain=MS_DOMAIN, K=k, N=n,
                            bits=8, block_size=32, accuracy_level=4)
    graph = helper.make_graph([node], "g", [x], [y], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MS_DOMAIN, 1)])


def forms(k: int, n: int) -> tuple[BlockWeights, np.ndarray, dict[str, onnx.ModelProto]]:
    weights = np.random.default_rng(0).normal(0, 0.05, (n, k)).astype(np.float32)
    grid = decompose(quants.quantize(weights, GGMLQuantizationType.Q4_1), GGMLQuantizationType.Q4_1)[0]
    codes, scales, zero_points = widen_to_8bit(grid)
    widened = ((codes.reshape(n, -1, 32) - zero_points[..., None].astype(np.float32)) * scales[..., None]).reshape(n, k)
    models = {"q4+min": _nbits(grid, 4), "w8-zp": zero_point_model(k, n, codes, scales, zero_points),
              "float": _matmul_model(k, n, np.ascontiguousarray(grid.dequantize().T))}
    return grid, widened, models


def relative_rms(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.sqrt(((got - want) ** 2).mean() / (want ** 2).mean()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=60)
    args = parser.parse_args()
    options = ort.SessionOptions()
    options.intra_op_num_threads = args.threads
    for k, n in ((576, 1536), (1536, 576)):
        grid, widened, models = forms(k, n)
        sessions = {name: ort.InferenceSession(m.SerializeToString(), options, providers=["CPUExecutionProvider"])
                    for name, m in models.items()}
        x = np.random.default_rng(1).standard_t(3, (1, max(WIDTHS), k)).astype(np.float32)
        inputs = {w: np.ascontiguousarray(x[:, :w]) for w in WIDTHS}
        times = {(name, w): [] for name in sessions for w in WIDTHS}
        for _ in range(args.rounds):
            for name, session in sessions.items():
                for w in WIDTHS:
                    start = time.perf_counter()
                    session.run(None, {"x": inputs[w]})
                    times[(name, w)].append(time.perf_counter() - start)
        exact = x.astype(np.float64) @ grid.dequantize().T.astype(np.float64)
        print(f"K={k} -> N={n}, {args.threads} thread(s); the widened weights alone move the exact product by "
              f"{relative_rms(x.astype(np.float64) @ widened.T.astype(np.float64), exact):.1e} (relative rms)")
        for name, session in sessions.items():
            wide = session.run(None, {"x": inputs[16]})[0]
            same = np.array_equal(wide[0, 0], session.run(None, {"x": inputs[1]})[0][0, 0])
            cells = "  ".join(f"w{w} {1e6 * np.median(times[(name, w)]):5.0f}" for w in WIDTHS)
            print(f"  {name:7s} {cells} us   row 0 alike at width 1 and 16: {same!s:5}  "
                  f"error vs x @ grid: {relative_rms(wide, exact):.1e}")


if __name__ == "__main__":
    main()

"""What one weight MatMul of the fast bundle costs per width, for each way of writing the Q4_1 grid in onnxruntime.

    python benchmarks/nbits_kernels.py [--threads 1] [--rounds 40]

SmolLM2's two MLP shapes (576 -> 1536: gate/up; 1536 -> 576: down), one random Q4_1 grid each, as:
  a4-b32+min   MatMulNBits, int8 activations, the grid's 32-input blocks; the block minimum by ReduceSum+MatMul+Add
  a4-b16+min   the same with the blocks split in two (activations quantized per 16 inputs)
  a0-b32+min   float activations (accuracy level 0), as the fast bundle's down_proj has had
  a4-fzp       the minimum folded into a float zero point (zp = -m/d): onnxruntime takes its unpacked path
  float        a plain float32 MatMul of the dequantized grid
  q8-b32, q8-b16  a Q8_0 grid (the output layer's) at int8 activations, in its 32-input blocks and split in two
Calls of every variant and width are interleaved; prints the median microseconds of each and the largest
|difference| between row 0 of a wider call and the one-row call (0: bit for bit).
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import onnx
import onnxruntime as ort
from gguf import GGMLQuantizationType, quants
from onnx import TensorProto, helper, numpy_helper

from mtpedge.export.block_weights import BlockWeights
from mtpedge.export.gguf_grid import decompose
from mtpedge.export.matmul_nbits import MS_DOMAIN, MatMulRewriter, weight_matmuls

WIDTHS = (1, 4, 16)


def _matmul_model(k: int, n: int, w_kn: np.ndarray) -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, "T", k])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, "T", n])
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], "g", [x], [y],
                              [numpy_helper.from_array(w_kn, "w")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _nbits(grid: BlockWeights, level: int) -> onnx.ModelProto:
    n, k = grid.shape
    model = _matmul_model(k, n, np.ascontiguousarray(grid.dequantize().T))
    rewriter = MatMulRewriter(model)
    rewriter.replace(weight_matmuls(model, "y")[0].node, grid, level)
    rewriter.finish()
    return model


def _float_zero_point(grid: BlockWeights) -> onnx.ModelProto:
    """w = d*q + m = d*(q - zp) with zp = -m/d per block: MatMulNBits' float zero points."""
    n, k = grid.shape
    model = _matmul_model(k, n, np.ascontiguousarray(grid.dequantize().T))
    zero = (grid.zero - grid.offsets / grid.scales).astype(np.float32).reshape(-1)  # codes are u - zero
    inits = [numpy_helper.from_array(grid.packed(), "codes"), numpy_helper.from_array(grid.scales.reshape(-1), "s"),
             numpy_helper.from_array(zero, "zp")]
    node = helper.make_node("MatMulNBits", ["x", "codes", "s", "zp"], ["y"], domain=MS_DOMAIN, K=k, N=n, bits=4,
                            block_size=grid.block_size, accuracy_level=4)
    del model.graph.node[:], model.graph.initializer[:]
    model.graph.node.append(node)
    model.graph.initializer.extend(inits)
    model.opset_import.append(helper.make_opsetid(MS_DOMAIN, 1))
    return model


def variants(k: int, n: int) -> dict[str, onnx.ModelProto]:
    rows = quants.quantize(np.random.default_rng(0).normal(0, 0.05, (n, k)).astype(np.float32),
                           GGMLQuantizationType.Q4_1)
    grid = decompose(rows, GGMLQuantizationType.Q4_1)[0]
    q8 = decompose(quants.quantize(np.random.default_rng(2).normal(0, 0.05, (n, k)).astype(np.float32),
                                   GGMLQuantizationType.Q8_0), GGMLQuantizationType.Q8_0)[0]
    return {"a4-b32+min": _nbits(grid, 4), "a4-b16+min": _nbits(grid.split_blocks(16), 4),
            "a0-b32+min": _nbits(grid, 0), "a4-fzp": _float_zero_point(grid),
            "float": _matmul_model(k, n, np.ascontiguousarray(grid.dequantize().T)),
            "q8-b32": _nbits(q8, 4), "q8-b16": _nbits(q8.split_blocks(16), 4)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=40)
    args = parser.parse_args()
    options = ort.SessionOptions()
    options.intra_op_num_threads = args.threads
    for k, n in ((576, 1536), (1536, 576)):
        sessions = {name: ort.InferenceSession(m.SerializeToString(), options, providers=["CPUExecutionProvider"])
                    for name, m in variants(k, n).items()}
        x = np.random.default_rng(1).normal(0, 1, (1, max(WIDTHS), k)).astype(np.float32)
        inputs = {w: np.ascontiguousarray(x[:, :w]) for w in WIDTHS}
        times = {(name, w): [] for name in sessions for w in WIDTHS}
        for _ in range(args.rounds):
            for name, sess in sessions.items():
                for w in WIDTHS:
                    start = time.perf_counter()
                    sess.run(None, {"x": inputs[w]})
                    times[(name, w)].append(time.perf_counter() - start)
        print(f"K={k} -> N={n}, {args.threads} thread(s), median us per call:")
        for name, sess in sessions.items():
            one = sess.run(None, {"x": inputs[1]})[0][0, 0]
            diff = max(float(np.abs(sess.run(None, {"x": inputs[w]})[0][0, 0] - one).max()) for w in WIDTHS[1:])
            cells = "  ".join(f"w{w} {1e6 * np.median(times[(name, w)]):7.0f}" for w in WIDTHS)
            print(f"  {name:11s} {cells}   row 0, wider call vs one row: max |diff| {diff:.1e}")


if __name__ == "__main__":
    main()

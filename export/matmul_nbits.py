"""Rewrite a traced graph's weight MatMuls as onnxruntime `MatMulNBits` nodes over `BlockWeights`.

    y = x @ W                       (x: (1, T, K), W: (K, N) float initializer)
 -> y = MatMulNBits(x, codes, scales)                                 zero point = default (fast path)
      [+ MatMul(ReduceSum(Reshape(x, (1, T, K/b, b)), -1), offsets)]    only when the grid has minima, b the
                                                                       minima's own block (minima_blocks)

MatMuls of one input with the same kind of blocks (q/k/v, gate/up) become one MatMulNBits over their weights side
by side, and one Split gives each its output back: one activation quantization and one kernel call instead of
three, bit for bit the same outputs (MLAS computes each output column alike whatever N is; on SmolLM2 every output
of the rewritten graphs was equal, and with the output layer's 16-input blocks a width-1 call took 0.955x and plain
decoding ran 1.06x at 1 thread: benchmarks/results/fast/lm16/bundle_ab_1thread.log, README section 13). The block
sums of an input are computed once for every MatMul reading it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import helper, numpy_helper

from mtpedge.runtime.kernels import DOMAIN as NATIVE_DOMAIN

from .block_weights import BlockWeights
from .native_matmul import block_matmul_node

MS_DOMAIN = "com.microsoft"


@dataclass(frozen=True)
class WeightMatMul:
    node: onnx.NodeProto
    weight_name: str  # the float (K, N) initializer
    is_output_layer: bool  # produces the graph's logits


def weight_matmuls(model: onnx.ModelProto, output_name: str = "logits") -> list[WeightMatMul]:
    """MatMul nodes whose second input is a 2-D float initializer (the decoder's Linear layers)."""
    inits = {t.name: t for t in model.graph.initializer}
    found = []
    for node in model.graph.node:
        if node.op_type != "MatMul" or node.input[1] not in inits:
            continue
        tensor = inits[node.input[1]]
        if len(tensor.dims) == 2 and tensor.data_type == onnx.TensorProto.FLOAT:
            found.append(WeightMatMul(node, node.input[1], output_name in node.output))
    return found


class MatMulRewriter:
    """Replaces MatMul nodes of one graph in place; call `finish()` once after the last replacement."""

    def __init__(self, model: onnx.ModelProto) -> None:
        self.model = model
        self.graph = model.graph
        self._block_sums: dict[tuple[str, int], str] = {}
        self._new_nodes: dict[str, list[onnx.NodeProto]] = {}  # original node's output -> replacement nodes
        self._new_inits: list[onnx.TensorProto] = []
        self._uses_native = False

    def replace(self, node: onnx.NodeProto, weights: BlockWeights, accuracy_level: int = 0) -> None:
        self.replace_side_by_side([node], [weights], accuracy_level)

    def replace_side_by_side(self, nodes: Sequence[onnx.NodeProto], parts: Sequence[BlockWeights],
                             accuracy_level: int = 0, native: bool = False) -> None:
        """MatMuls that read one input (`nodes`, in graph order) as one MatMulNBits over `parts` side by side
        (`native`: one com.mtpedge.BlockMatMul, which applies block minima itself: native_matmul.py)."""
        first, weights = nodes[0], BlockWeights.side_by_side(parts)
        n, k = weights.shape
        base = first.input[1] if len(nodes) == 1 else f"{first.input[1]}.and{len(nodes) - 1}"
        x = first.input[0]
        y = first.output[0] if len(nodes) == 1 else f"{first.output[0]}.side_by_side"
        if native:
            node, inits = block_matmul_node(x, y, weights, base)
            self._new_inits += inits
            self._uses_native = True
            self._place(nodes, parts, base, y, [node])
            return
        codes_name, scales_name = f"{base}.q{weights.bits}", f"{base}.scales"
        self._new_inits += [numpy_helper.from_array(weights.packed(), codes_name),
                            numpy_helper.from_array(weights.scales.reshape(-1), scales_name)]
        nbits_out = y if weights.offsets is None else f"{y}.blocks"
        new = [helper.make_node(
            "MatMulNBits", [x, codes_name, scales_name], [nbits_out], name=f"{first.name or y}.nbits",
            domain=MS_DOMAIN, K=k, N=n, bits=weights.bits, block_size=weights.block_size,
            accuracy_level=accuracy_level)]
        if weights.offsets is not None:
            offsets, offset_block = minima_blocks(weights)
            offsets_name = f"{base}.offsets"
            self._new_inits.append(numpy_helper.from_array(np.ascontiguousarray(offsets.T), offsets_name))
            sums = self._block_sum(x, k, offset_block, new)
            new += [helper.make_node("MatMul", [sums, offsets_name], [f"{y}.minima"], name=f"{y}.minima"),
                    helper.make_node("Add", [nbits_out, f"{y}.minima"], [y], name=f"{y}.add_minima")]
        self._place(nodes, parts, base, y, new)

    def _place(self, nodes: Sequence[onnx.NodeProto], parts: Sequence[BlockWeights], base: str, y: str,
               new: list[onnx.NodeProto]) -> None:
        """Split a side-by-side product back into its MatMuls' outputs; the new nodes stand where the first MatMul
        stood (its input is ready there), the others' places stay empty."""
        first = nodes[0]
        if len(nodes) > 1:
            sizes = f"{base}.split"
            self._new_inits.append(numpy_helper.from_array(np.array([p.shape[0] for p in parts], np.int64), sizes))
            new.append(helper.make_node("Split", [y, sizes], [m.output[0] for m in nodes], name=f"{y}.split", axis=-1))
        self._new_nodes[first.output[0]] = new
        for other in nodes[1:]:
            self._new_nodes[other.output[0]] = []

    def _block_sum(self, x: str, k: int, block_size: int, nodes: list[onnx.NodeProto]) -> str:
        key = (x, block_size)
        if key not in self._block_sums:
            shape_name, axes_name, out = f"{x}.blockshape{block_size}", f"{x}.lastaxis", f"{x}.blocksum{block_size}"
            self._new_inits += [numpy_helper.from_array(np.array([0, 0, k // block_size, block_size], np.int64),
                                                        shape_name),
                                numpy_helper.from_array(np.array([-1], np.int64), axes_name)]
            nodes += [helper.make_node("Reshape", [x, shape_name], [f"{out}.blocks"], name=f"{out}.reshape"),
                      helper.make_node("ReduceSum", [f"{out}.blocks", axes_name], [out], name=out, keepdims=0)]
            self._block_sums[key] = out
        return self._block_sums[key]

    def finish(self) -> None:
        """Splice the replacements in (keeping topological order) and drop initializers nothing reads."""
        nodes = []
        for node in self.graph.node:
            nodes += [_copy(n) for n in self._new_nodes.get(node.output[0], [node])]
        del self.graph.node[:]
        self.graph.node.extend(nodes)
        names = {t.name for t in self.graph.initializer}
        self.graph.initializer.extend(t for t in self._new_inits if t.name not in names)
        used = {name for node in self.graph.node for name in node.input}
        kept = [_copy(t) for t in self.graph.initializer if t.name in used]
        del self.graph.initializer[:]
        self.graph.initializer.extend(kept)
        for domain in (MS_DOMAIN, NATIVE_DOMAIN) if self._uses_native else (MS_DOMAIN,):
            if not any(o.domain == domain for o in self.model.opset_import):
                self.model.opset_import.append(helper.make_opsetid(domain, 1))


def minima_blocks(weights: BlockWeights) -> tuple[np.ndarray, int]:
    """(offsets (N, K / b), b): the block minima over the coarsest block b (a multiple of the weights' block) over
    which every row's minimum is one value. A Q4_1 grid split into 16-input blocks (its activations quantized more
    finely) keeps one minimum per 32 inputs: its correction MatMul reads half the rows."""
    offsets, block = weights.offsets, weights.block_size
    n, k = weights.shape
    while k % (2 * block) == 0:
        pairs = offsets.reshape(n, -1, 2)
        if not np.array_equal(pairs[:, :, 0], pairs[:, :, 1]):
            break
        offsets, block = pairs[:, :, 0], 2 * block
    return offsets, block


def _copy(message):
    """A detached copy: elements of a protobuf repeated field must not outlive its clearing."""
    clone = type(message)()
    clone.CopyFrom(message)
    return clone

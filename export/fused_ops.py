"""Rewrite a traced decoder graph onto onnxruntime's fused CPU contrib ops (com.microsoft).

The traced graph spells each piece of the decoder out in small operators, and a width-1 call is short enough
that their count matters. onnxruntime's own load-time optimizer already turns the RMSNorm chain into
`SimplifiedLayerNormalization` and the rotary Slices into Splits; this pass goes further:

    residual Add + RMSNorm           -> SkipSimplifiedLayerNormalization (the sum comes out as its 4th output)
    RMSNorm (no residual before it)  -> SimplifiedLayerNormalization
    rotary: Slice x2, Mul x4, Sub, Add, Concat -> RotaryEmbedding

RotaryEmbedding reads its tables by position id; the contract's host tables already hold each slot's own
cos/sin (rope_cos (1, 1, N, D/2)), so the graph feeds them as an N-row table and the position ids 0..N-1:
every slot reads its own row, and the runtime's contract does not change.

Applied to MatMulNBits bundles whose QuantConfig asks (export/bundle_writer.py; the fast recipe does): on the
AVX-512 machine a width-1 call took 0.85x the time at 1 thread, plain decoding went from 0.90x to 0.94x llama.cpp
on the tuning set (benchmarks/results/fast/README.md, section 9); on the AVX2 one, over the lm16 recipe, a
width-1 call 0.89x and plain decoding 1.06x, top-1 vs float32 98.06% held text / 97.04% Spec-Bench answers
(section 15). A float32 bundle keeps standard operators (0.99x at width 1; and the QDQ/HTP converter needs them).
Patterns that do not match exactly are left alone, so the pass never changes what a graph computes beyond float
rounding.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import onnx
from onnx import helper, numpy_helper

MS_DOMAIN = "com.microsoft"


class GraphIndex:
    """Producer / consumer lookups and constant values over one graph's node list."""

    def __init__(self, model: onnx.ModelProto) -> None:
        self.graph = model.graph
        self.producer = {out: node for node in self.graph.node for out in node.output}
        self.consumers: dict[str, list[onnx.NodeProto]] = defaultdict(list)
        for node in self.graph.node:
            for name in node.input:
                self.consumers[name].append(node)
        self.initializers = {t.name: t for t in self.graph.initializer}
        self.inputs = {v.name for v in self.graph.input}

    def const(self, name: str) -> np.ndarray | None:
        """The value of a Constant node's output or an inline initializer; None for anything else."""
        node = self.producer.get(name)
        if node is not None and node.op_type == "Constant":
            return numpy_helper.to_array(node.attribute[0].t)
        tensor = self.initializers.get(name)
        if tensor is not None and tensor.data_location != onnx.TensorProto.EXTERNAL:
            return numpy_helper.to_array(tensor)
        return None

    def op(self, name: str, op_type: str) -> onnx.NodeProto | None:
        node = self.producer.get(name)
        return node if node is not None and node.op_type == op_type else None

    def only_consumer(self, name: str, op_type: str) -> onnx.NodeProto | None:
        users = self.consumers.get(name, [])
        return users[0] if len(users) == 1 and users[0].op_type == op_type else None


def scalar_value(value: np.ndarray | None, expected: float | None = None) -> float | None:
    if value is None or value.size != 1:
        return None
    number = float(value.reshape(()))
    return number if expected is None or number == expected else None


def _attr(node: onnx.NodeProto, name: str, default=None):
    found = [a for a in node.attribute if a.name == name]
    return helper.get_attribute_value(found[0]) if found else default


def _rms_norm(g: GraphIndex, pow_node: onnx.NodeProto) -> tuple[str, str, float, onnx.NodeProto] | None:
    """x * (1 / sqrt(mean(x^2, -1) + eps)) * weight starting at its Pow: (x, weight, eps, last Mul) or None."""
    x = pow_node.input[0]
    if scalar_value(g.const(pow_node.input[1]), 2.0) is None:
        return None
    mean = g.only_consumer(pow_node.output[0], "ReduceMean")
    if mean is None or list(_attr(mean, "axes", [])) != [-1] or _attr(mean, "keepdims", 1) != 1:
        return None
    add = g.only_consumer(mean.output[0], "Add")
    eps = scalar_value(g.const(add.input[1])) if add is not None else None
    sqrt = g.only_consumer(add.output[0], "Sqrt") if eps is not None else None
    div = g.only_consumer(sqrt.output[0], "Div") if sqrt is not None else None
    if div is None or scalar_value(g.const(div.input[0]), 1.0) is None:
        return None
    scale = g.only_consumer(div.output[0], "Mul")
    if scale is None or set(scale.input) != {x, div.output[0]}:
        return None
    last = g.only_consumer(scale.output[0], "Mul")
    if last is None:
        return None
    weight = next((name for name in last.input if name != scale.output[0]), None)
    if weight not in g.initializers:
        return None
    return x, weight, eps, last


def _fuse_norms(g: GraphIndex, new_nodes: dict[int, list[onnx.NodeProto]], dropped: set[int]) -> int:
    index = {id(node): i for i, node in enumerate(g.graph.node)}
    fused = 0
    for pow_node in [n for n in g.graph.node if n.op_type == "Pow"]:
        match = _rms_norm(g, pow_node)
        if match is None:
            continue
        x, weight, eps, last = match
        residual = g.op(x, "Add")
        shapes_equal = residual is not None and all(g.const(name) is None for name in residual.input)
        name = last.name or f"{x}.rmsnorm"
        if shapes_equal and index[id(residual)] not in dropped:
            # the residual sum comes out of the fused op as its 4th output under the Add's own name
            node = helper.make_node("SkipSimplifiedLayerNormalization", [*residual.input, weight],
                                    [last.output[0], "", "", residual.output[0]], name=f"{name}.skip",
                                    domain=MS_DOMAIN, epsilon=eps)
            dropped.add(index[id(residual)])
        else:
            node = helper.make_node("SimplifiedLayerNormalization", [x, weight], [last.output[0]],
                                    name=f"{name}.fused", axis=-1, epsilon=eps, stash_type=1)
        new_nodes[index[id(last)]].append(node)
        dropped.add(index[id(last)])
        fused += 1
    return fused


def _half_slice(g: GraphIndex, name: str, first: bool) -> tuple[str, int] | None:
    """(sliced tensor, half) when `name` is x[..., :half] (first) or x[..., half:] of a Slice on the last axis."""
    node = g.op(name, "Slice")
    if node is None or len(node.input) < 4:
        return None
    starts, ends, axes = (g.const(node.input[i]) for i in (1, 2, 3))
    steps = g.const(node.input[4]) if len(node.input) > 4 else np.ones(1)
    if any(v is None or v.size != 1 for v in (starts, ends, axes, steps)) or int(steps[0]) != 1:
        return None
    if int(axes[0]) not in (-1, 3):
        return None
    start, end = int(starts[0]), int(ends[0])
    if first:
        return (node.input[0], end) if start == 0 else None
    return (node.input[0], start) if end >= 2**31 - 1 or end < 0 else None


def _rotary(g: GraphIndex, concat: onnx.NodeProto, cos: str, sin: str) -> str | None:
    """The rotated tensor x when `concat` is cat(x1*cos - x2*sin, x2*cos + x1*sin) of x's halves; else None."""
    if len(concat.input) != 2 or _attr(concat, "axis") not in (-1, 3):
        return None
    sub, add = g.op(concat.input[0], "Sub"), g.op(concat.input[1], "Add")
    if sub is None or add is None:
        return None
    products = [g.op(name, "Mul") for name in (*sub.input, *add.input)]
    if any(p is None for p in products):
        return None
    pairs = [tuple(p.input) for p in products]
    x1 = _half_slice(g, pairs[0][0], first=True)
    x2 = _half_slice(g, pairs[1][0], first=False)
    if x1 is None or x2 is None or x1 != x2:
        return None
    a, b = pairs[0][0], pairs[1][0]  # x1, x2 as tensors
    expected = [(a, cos), (b, sin), (b, cos), (a, sin)]
    return x1[0] if pairs == expected else None


def _fuse_rotary(g: GraphIndex, width: int, half: int, new_nodes: dict[int, list[onnx.NodeProto]],
                 dropped: set[int]) -> int:
    fused = 0
    positions, cos_table, sin_table = "rotary.position_ids", "rotary.cos_table", "rotary.sin_table"
    for i, node in enumerate(g.graph.node):
        if node.op_type != "Concat":
            continue
        x = _rotary(g, node, "rope_cos", "rope_sin")
        if x is None:
            continue
        new_nodes[i].append(helper.make_node("RotaryEmbedding", [x, positions, cos_table, sin_table],
                                             [node.output[0]], name=f"{node.name}.rotary", domain=MS_DOMAIN,
                                             interleaved=0))
        dropped.add(i)
        fused += 1
    if fused:
        # the host's per-slot tables as an N-row table read at positions 0..N-1: each slot its own row
        g.graph.initializer.extend([
            numpy_helper.from_array(np.arange(width, dtype=np.int64).reshape(1, width), positions),
            numpy_helper.from_array(np.array([width, half], dtype=np.int64), "rotary.table_shape")])
        new_nodes[-1] += [helper.make_node("Reshape", [table, "rotary.table_shape"], [out], name=f"{out}.reshape")
                          for table, out in (("rope_cos", cos_table), ("rope_sin", sin_table))]
    return fused


def drop_dead_nodes(graph: onnx.GraphProto) -> None:
    """Remove nodes whose outputs nothing reads (the unfused chains' leftovers, their Constants)."""
    live = {out.name for out in graph.output}
    keep = []
    for node in reversed(graph.node):
        if any(out in live for out in node.output if out):
            keep.append(node)
            live.update(node.input)
    del graph.node[:]
    graph.node.extend(reversed(keep))


def fuse_decoder_ops(model: onnx.ModelProto) -> dict[str, int]:
    """Rewrite `model` in place onto the fused contrib ops; how many of each were fused."""
    g = GraphIndex(model)
    shapes = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim] for v in model.graph.input}
    new_nodes: dict[int, list[onnx.NodeProto]] = defaultdict(list)
    dropped: set[int] = set()
    norms = _fuse_norms(g, new_nodes, dropped)
    rotary = 0
    if "rope_cos" in shapes:
        _, _, width, half = shapes["rope_cos"]
        rotary = _fuse_rotary(g, width, half, new_nodes, dropped)
    skips = sum(n.op_type == "SkipSimplifiedLayerNormalization" for nodes in new_nodes.values() for n in nodes)
    # the table reshapes first (key -1), then each fused node where the chain's last node stood: topological
    nodes = list(new_nodes.pop(-1, []))
    for i, node in enumerate(model.graph.node):
        nodes += new_nodes.get(i, [])
        if i not in dropped:
            nodes.append(node)
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    drop_dead_nodes(model.graph)
    if (norms or rotary) and not any(o.domain == MS_DOMAIN for o in model.opset_import):
        model.opset_import.append(helper.make_opsetid(MS_DOMAIN, 1))
    return {"skip_rms_norm": skips, "rms_norm": norms - skips, "rotary": rotary}

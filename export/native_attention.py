"""Each layer's attention over the cache as one com.mtpedge.CacheAttention (runtime/kernels/cache_attention.c).

The traced graph writes the block's new keys and values into the cache with two ScatterElements, then attends
over all C columns of the static bucket with ~15 onnxruntime kernels (transposes, two products, the bias, softmax,
reshapes). The kernel does the same in one node, reading only the columns each row's bias opens:

    q_rot (1, H, T, D) --Reshape (1, KV, H/KV*T, D)--Mul(scale)--MatMul(Transpose(present_key))--Reshape--Add(bias)
        --Softmax--Reshape--MatMul(present_value)--Reshape (1, H, T, D)--Transpose--Reshape--> out (1, T, H*D)
    present_key / present_value = ScatterElements(past, cache_slots, new rows)
 -> out, present_key, present_value = CacheAttention(q_rot, new_key, new_value, past_key, past_value, cache_slots,
                                                     attention_bias)

Chains that do not match this shape are left alone.
"""

from __future__ import annotations

import onnx
from onnx import helper

from mtpedge.runtime.contract import CACHE_SLOTS
from mtpedge.runtime.kernels import DOMAIN

from .fused_ops import GraphIndex, drop_dead_nodes, scalar_value

ATTENTION_BIAS = "attention_bias"


def _chain(g: GraphIndex, start: str, ops: tuple[str, ...]) -> onnx.NodeProto | None:
    """The last node of a chain of single consumers of `start` with these op types, or None."""
    node, name = None, start
    for op in ops:
        node = g.only_consumer(name, op)
        if node is None:
            return None
        name = node.output[0]
    return node


def _layer(g: GraphIndex, scatter_key: onnx.NodeProto,
           mask_value: float) -> tuple[onnx.NodeProto, onnx.NodeProto] | None:
    """(the CacheAttention node, the node it stands in for) of one layer, or None if the chain differs."""
    present_key = scatter_key.output[0]
    present_value = "present_value_" + present_key.removeprefix("present_key_")
    scatter_value = g.op(present_value, "ScatterElements")
    transposed = next((n for n in g.consumers[present_key] if n.op_type == "Transpose"), None)
    if scatter_value is None or transposed is None or len(g.consumers[transposed.output[0]]) != 1:
        return None
    scores = g.consumers[transposed.output[0]][0]
    scaled = g.op(scores.input[0], "Mul") if scores.op_type == "MatMul" else None
    if scaled is None:
        return None
    scale_input = 1 if g.const(scaled.input[1]) is not None else 0
    scale = scalar_value(g.const(scaled.input[scale_input]))
    grouped = g.op(scaled.input[1 - scale_input], "Reshape")
    mixed = next((n for n in g.consumers[present_value] if n.op_type == "MatMul"), None)
    end = _chain(g, mixed.output[0], ("Reshape", "Transpose", "Reshape")) if mixed is not None else None
    if scale is None or grouped is None or end is None:
        return None
    inputs = [grouped.input[0], scatter_key.input[2], scatter_value.input[2], scatter_key.input[0],
              scatter_value.input[0], CACHE_SLOTS, ATTENTION_BIAS]
    node = helper.make_node("CacheAttention", inputs, [end.output[0], present_key, present_value],
                            name=f"{present_key}.cache_attention", domain=DOMAIN, scale=scale,
                            masked_below=mask_value / 2)
    return node, end


def fuse_cache_attention(model: onnx.ModelProto, mask_value: float) -> int:
    """Rewrite `model` in place: each layer's attention chain as one CacheAttention; how many layers."""
    g = GraphIndex(model)
    if not {CACHE_SLOTS, ATTENTION_BIAS} <= g.inputs:
        return 0
    replaced: dict[str, onnx.NodeProto] = {}  # output of the node stood in for -> the new node
    dropped: set[str] = set()
    for scatter in [n for n in model.graph.node if n.op_type == "ScatterElements"
                    and n.output[0].startswith("present_key_")]:
        found = _layer(g, scatter, mask_value)
        if found is not None:
            node, end = found
            replaced[end.output[0]] = node
            dropped |= set(node.output[1:])  # the two scatters: the new node writes present_key / present_value
    if not replaced:
        return 0
    nodes = []
    for node in model.graph.node:
        if node.output and node.output[0] in replaced:
            nodes.append(replaced[node.output[0]])
        elif not (node.output and node.output[0] in dropped):
            nodes.append(node)
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    drop_dead_nodes(model.graph)
    if not any(o.domain == DOMAIN for o in model.opset_import):
        model.opset_import.append(helper.make_opsetid(DOMAIN, 1))
    return len(replaced)

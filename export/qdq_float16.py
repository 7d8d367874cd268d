"""The nodes of a QDQ graph that stay float, which the HTP runs in fp16 while the rest runs in fixed point.

A 16-bit activation grid is one scale per tensor: a tensor whose range is set by a few huge values loses
its ordinary ones. SmolLM2-135M's residual stream has such a value: at the first position one channel
(507) reaches 24875 from layer 11's MLP until layer 28's removes it, while the stream's 99.9th percentile
stays near 125 (benchmarks/results/quant/qdq_recipe.md). A uint16 grid over [-850, 24875] steps by 0.39,
coarser than most of the stream; fp16 keeps each element's own exponent. So:

  - the residual stream (every Add that carries it from `inputs_embeds` to the final norm) and the RMSNorms
    that read it stay float;
  - so do the producer and the consumers of any other tensor whose largest magnitude exceeds its 99.9th
    percentile by `outlier_ratio` (measured on the float graph over calibration calls): in SmolLM2 the
    down projections (and their inputs) of the few MLPs that write or erase the huge values.

onnxruntime's QNN EP runs a QDQ graph's float nodes in fp16 on the HTP (its default
`enable_htp_fp16_precision`); the simulator ran such mixed graphs whole with CPU fallback disabled, and its
fp16 RMSNorm kept the 24875-valued row without overflow (max error 0.007 on outputs up to 35).
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper

STREAM_INPUT = "inputs_embeds"
NORM = "SimplifiedLayerNormalization"  # what fuse_rms_norms writes


def _links(model: onnx.ModelProto) -> tuple[dict[str, onnx.NodeProto], dict[str, list[onnx.NodeProto]]]:
    """(the node producing each tensor, the nodes reading each tensor)."""
    producer = {out: node for node in model.graph.node for out in node.output}
    consumers: dict[str, list[onnx.NodeProto]] = {}
    for node in model.graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    return producer, consumers


def residual_adds(model: onnx.ModelProto) -> list[onnx.NodeProto]:
    """The Adds of the residual stream in order: from inputs_embeds, each time the one Add reading the stream."""
    _, consumers = _links(model)
    adds, stream = [], STREAM_INPUT
    while True:
        step = [n for n in consumers.get(stream, []) if n.op_type == "Add"]
        if len(step) != 1:
            return adds
        adds.append(step[0])
        stream = step[0].output[0]


def stream_nodes(model: onnx.ModelProto) -> list[str]:
    """The residual Adds and the norms that read the stream (input, post-attention and final norms)."""
    adds = residual_adds(model)
    stream = {STREAM_INPUT} | {a.output[0] for a in adds}
    norms = [n for n in model.graph.node if n.op_type == NORM and n.input[0] in stream]
    return [n.name for n in adds + norms]


def activation_statistics(model: onnx.ModelProto, feeds: list[dict[str, np.ndarray]]
                          ) -> dict[str, tuple[float, float]]:
    """(largest |x|, 99.9th percentile of |x|) of every float intermediate tensor over the calls `feeds`."""
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    outputs = {o.name for o in probe.graph.output}
    produced = {out for node in probe.graph.node if node.op_type != "Constant" for out in node.output}
    inferred = onnx.shape_inference.infer_shapes(probe)
    names = [v.name for v in inferred.graph.value_info if v.name in produced and v.name not in outputs
             and v.type.tensor_type.elem_type == onnx.TensorProto.FLOAT]
    probe.graph.output.extend(helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None) for name in names)
    session = ort.InferenceSession(probe.SerializeToString(), providers=["CPUExecutionProvider"])
    stats: dict[str, tuple[float, float]] = {}
    for call in feeds:
        for name, value in zip(names, session.run(names, call), strict=True):
            magnitude = np.abs(value).ravel()
            top = float(magnitude.max()) if magnitude.size else 0.0
            k = int(0.999 * (magnitude.size - 1))
            p999 = float(np.partition(magnitude, k)[k]) if magnitude.size else 0.0
            old = stats.get(name, (0.0, 0.0))
            stats[name] = (max(top, old[0]), max(p999, old[1]))
    return stats


def outlier_nodes(model: onnx.ModelProto, stats: dict[str, tuple[float, float]], ratio: float,
                  min_magnitude: float = 8.0) -> list[str]:
    """Producers and consumers of tensors whose largest |x| (at least min_magnitude) exceeds ratio x p99.9."""
    producer, _ = _links(model)
    picked: list[str] = []
    for node in model.graph.node:
        for name in node.input:
            top, p999 = stats.get(name, (0.0, 0.0))
            if name in producer and top >= min_magnitude and top > ratio * max(p999, 1e-6):
                picked += [producer[name].name, node.name]
    return picked


def attention_core_nodes(model: onnx.ModelProto) -> list[str]:
    """Each layer's attention between the projections: K's transpose, q.K, the reshapes, the bias Add, Softmax,
    probabilities.V and the reshape after it.

    The whole chain, so that no QuantizeLinear sits inside it: leaving only the two products float changed
    nothing, because onnxruntime moved the Q after each product's Reshape back onto the product
    (benchmarks/results/quant/smollm2.md).
    """
    producer, consumers = _links(model)

    def only_reader(node: onnx.NodeProto) -> onnx.NodeProto | None:
        readers = consumers.get(node.output[0], [])
        return readers[0] if len(readers) == 1 else None

    picked: list[str] = []
    for softmax in (n for n in model.graph.node if n.op_type == "Softmax"):
        chain, scores = [softmax], producer.get(softmax.input[0])
        while scores is not None and scores.op_type in ("Add", "Reshape"):  # bias Add, scores' reshape
            chain.append(scores)
            scores = producer.get(scores.input[0])
        if scores is None or scores.op_type != "MatMul":
            continue
        chain += [scores] + [producer[name] for name in scores.input
                             if name in producer and producer[name].op_type == "Transpose"]  # K's transpose
        values = only_reader(softmax)
        while values is not None and values.op_type == "Reshape":
            chain.append(values)
            values = only_reader(values)
        if values is not None and values.op_type == "MatMul":  # probabilities.V, then its reshape
            chain += [values] + [n for n in consumers.get(values.output[0], []) if n.op_type == "Reshape"]
        picked += [n.name for n in chain]
    return picked


def float16_nodes(model: onnx.ModelProto, stats: dict[str, tuple[float, float]] | None, residual: bool,
                  outlier_ratio: float, attention: bool = False) -> list[str]:
    """The nodes to leave unquantized (fp16 on the HTP), sorted: the stream if `residual`, outliers, and each
    layer's attention core if `attention`."""
    names = stream_nodes(model) if residual else []
    if outlier_ratio > 0 and stats:
        names += outlier_nodes(model, stats, outlier_ratio)
    if attention:
        names += attention_core_nodes(model)
    return sorted(set(names))

"""Per-channel smoothing of the norms' outputs before quantization (SmoothQuant, Xiao et al., 2023).

Each RMSNorm output feeds projections (q/k/v, gate/up, the LM head) through a 16-bit grid of one scale per
tensor; a few channels with large values (the norm's gain, the first position's huge channel) set that
scale for all. Dividing channel j of the norm's gain by s_j and multiplying row j of every projection it
feeds by s_j leaves the float model's function as it was and moves the outliers into the weights, whose
grids are per output channel: s_j = max|x_j|^alpha / max|w_j|^(1 - alpha).
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper, numpy_helper

from .qdq_float16 import NORM

ALPHA = 0.5  # how much of each channel's outlier moves into the weights (SmoothQuant's default)


def smoothable_norms(model: onnx.ModelProto, float_nodes: list[str]) -> dict[str, list[onnx.NodeProto]]:
    """Quantized-path norms whose output feeds only MatMuls with constant weights: norm name -> those MatMuls."""
    inits = {t.name for t in model.graph.initializer}
    consumers: dict[str, list[onnx.NodeProto]] = {}
    for node in model.graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    found = {}
    for node in model.graph.node:
        users = consumers.get(node.output[0], [])
        if (node.op_type == NORM and node.input[1] in inits and users and node.output[0] not in
                {o.name for o in model.graph.output}
                and all(u.op_type == "MatMul" and u.input[0] == node.output[0] and u.input[1] in inits
                        and u.name not in float_nodes for u in users)):
            found[node.name] = users
    return found


def channel_maxima(model: onnx.ModelProto, feeds: list[dict[str, np.ndarray]], tensors: list[str]
                   ) -> dict[str, np.ndarray]:
    """max |x| per last-axis channel of each named tensor over the calls `feeds`."""
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    probe.graph.output.extend(helper.make_tensor_value_info(t, onnx.TensorProto.FLOAT, None) for t in tensors)
    session = ort.InferenceSession(probe.SerializeToString(), providers=["CPUExecutionProvider"])
    maxima: dict[str, np.ndarray] = {}
    for call in feeds:
        for name, value in zip(tensors, session.run(tensors, call), strict=True):
            top = np.abs(value.reshape(-1, value.shape[-1])).max(axis=0)
            maxima[name] = np.maximum(maxima.get(name, top), top)
    return maxima


def smoothing_factors(model: onnx.ModelProto, feeds: list[dict[str, np.ndarray]], float_nodes: list[str],
                      alpha: float = ALPHA) -> dict[str, np.ndarray]:
    """norm node name -> s (one factor per channel), from the float graph's calibration calls."""
    norms = smoothable_norms(model, float_nodes)
    by_name = {n.name: n for n in model.graph.node}
    inits = {t.name: t for t in model.graph.initializer}
    activations = channel_maxima(model, feeds, [by_name[name].output[0] for name in norms])
    factors = {}
    for name, users in norms.items():
        weights = np.max([np.abs(numpy_helper.to_array(inits[u.input[1]])).max(axis=1) for u in users], axis=0)
        a = np.maximum(activations[by_name[name].output[0]], 1e-5)
        factors[name] = (a ** alpha / np.maximum(weights, 1e-5) ** (1 - alpha)).astype(np.float32)
    return factors


def apply_smoothing(model: onnx.ModelProto, factors: dict[str, np.ndarray]) -> None:
    """gain_j / s_j in each norm, row j * s_j in each MatMul it feeds (by node name: the same in every width)."""
    inits = {t.name: t for t in model.graph.initializer}
    uses: dict[str, int] = {}
    users: dict[str, list[onnx.NodeProto]] = {}
    for node in model.graph.node:
        for name in node.input:
            uses[name] = uses.get(name, 0) + 1
        users.setdefault(node.input[0] if node.input else "", []).append(node)

    def rescale(node: onnx.NodeProto, slot: int, change) -> None:
        """Replace the node's constant input `slot` by change(value), in a copy of its own if others share it."""
        old = inits[node.input[slot]]
        name = old.name if uses[old.name] == 1 else f"{old.name}.smoothed.{node.name}"
        new = numpy_helper.from_array(change(numpy_helper.to_array(old)), name)
        if name == old.name:
            old.CopyFrom(new)
        else:  # exporters share equal constants (e.g. all-ones gains): give this node its own
            model.graph.initializer.append(new)
            node.input[slot] = name

    for node in model.graph.node:
        if node.name in factors:
            s = factors[node.name]
            rescale(node, 1, lambda gain, s=s: gain / s)
            for user in users[node.output[0]]:
                rescale(user, 1, lambda weight, s=s: weight * s[:, None])

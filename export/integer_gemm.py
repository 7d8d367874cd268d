"""Weight products on onnxruntime's integer GEMM: MatMulNBits (+ its Q4_1 block-minimum correction) -> MatMulInteger.

MatMulNBits with int8 activations (accuracy level 4) computes a one-row call well, but a wider call costs about
the row count times as much on the CPUs measured here: a width-16 call of SmolLM2 took 3.8x a width-1 call. MLAS's
integer GEMM (the kernel behind MatMulInteger, with AVX-512 VNNI and AMX where the CPU has them) takes 16 rows for
little more than one. So each weight product becomes

    q      = uint8(round(x / s) + 128),  s = max|x| / 127 over each row (one scale per row, shared by every
             product that reads x: q/k/v side by side, gate/up side by side)
    y      = float(MatMulInteger(q, W8, zero point 128)) * (s x w)

where W8 is the product's exact float weights (the GGUF grid's codes, scales and block minima) re-quantized to
int8 with one scale w per output column. Integer sums are exact in any order, and every other step is per row
or per element, so a row's result does not depend on the other rows of the call: a drafted block's rows equal
plain decoding's at every width, which lossless drafting needs. The price is one more rounding of the weights
(about 1/127 of a column's largest weight) and per-row rather than per-block activation scales; the bundle's
quality report measures what that costs against float32.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import helper, numpy_helper

ZERO_POINT = 128


def dequantized_weights(node: onnx.NodeProto, inits: dict[str, onnx.TensorProto],
                        minima: np.ndarray | None) -> np.ndarray:
    """The (K, N) float weights a MatMulNBits node (default zero points) and its block-minimum table compute."""
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    k, n, bits, block = attrs["K"], attrs["N"], attrs["bits"], attrs["block_size"]
    if len(node.input) > 3 and node.input[3]:
        raise ValueError(f"{node.name}: MatMulNBits with explicit zero points is not converted")
    packed = numpy_helper.to_array(inits[node.input[1]]).reshape(n, -1)
    if bits == 4:  # low nibble first
        codes = np.stack([packed & 15, packed >> 4], -1).reshape(n, -1)
    elif bits == 8:
        codes = packed
    else:
        raise ValueError(f"{node.name}: {bits}-bit MatMulNBits is not converted")
    scales = numpy_helper.to_array(inits[node.input[2]]).astype(np.float32).reshape(n, -1, 1)
    centred = codes[:, :k].reshape(n, -1, block).astype(np.float32) - 2 ** (bits - 1)
    weights = (scales * centred).reshape(n, k)
    if minima is not None:  # (K / B, N): each block's minimum, added to every weight of the block
        weights += np.repeat(minima.astype(np.float32), k // minima.shape[0], axis=0).T
    return weights.T


def int8_columns(weights_kn: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric int8 codes (K, N) and one float32 scale per column, so that codes * scale ~ weights."""
    scale = np.maximum(np.abs(weights_kn).max(axis=0), np.float32(1e-30)) / 127
    codes = np.clip(np.round(weights_kn / scale), -127, 127).astype(np.int8)
    return codes, scale.astype(np.float32)


def _minimum_correction(model: onnx.ModelProto, node: onnx.NodeProto, inits: dict):
    """(Add, MatMul, table) of the block-minimum correction added to `node`'s output, or None."""
    readers = [n for n in model.graph.node if node.output[0] in n.input]
    if len(readers) != 1 or readers[0].op_type != "Add":
        return None
    add = readers[0]
    other = add.input[1] if add.input[0] == node.output[0] else add.input[0]
    matmul = next((n for n in model.graph.node if other in n.output), None)
    if matmul is None or matmul.op_type != "MatMul" or matmul.input[1] not in inits:
        return None
    return add, matmul, numpy_helper.to_array(inits[matmul.input[1]])


def _row_quantization(x: str) -> list[onnx.NodeProto]:
    """x -> (x.q uint8, x.rowscale): one scale per row (last axis), zero point 128."""
    return [helper.make_node("Abs", [x], [f"{x}.abs"]),
            helper.make_node("ReduceMax", [f"{x}.abs"], [f"{x}.absmax"], keepdims=1, axes=[-1]),  # opset 13 form
            helper.make_node("Mul", [f"{x}.absmax", "igemm.inv127"], [f"{x}.rowscale0"]),
            helper.make_node("Max", [f"{x}.rowscale0", "igemm.tiny"], [f"{x}.rowscale"]),  # an all-zero row
            helper.make_node("Div", [x, f"{x}.rowscale"], [f"{x}.scaled"]),
            # round half to even, + 128, to uint8: one kernel instead of Round, Add and Cast
            helper.make_node("QuantizeLinear", [f"{x}.scaled", "igemm.one", "igemm.zero_point"], [f"{x}.q"])]


@dataclass
class IntegerGemmRecipe:
    """How activations are prepared: `input_maxima` (max |x| per channel by input tensor name, from calibration)
    turns on smoothing with `alpha` (SmoothQuant: x / s and s * W rows, s = maxima**alpha / max|W row|**(1 -
    alpha)) and, with `float_channels` > 0, keeps that many largest channels of each input out of the integer
    product, in float (LLM.int8()'s decomposition), as an elementwise product and a sum over a fixed axis, so
    that rows stay independent of each other."""

    roles: tuple[str, ...] | None = None  # node names holding one of these (None: every MatMulNBits)
    input_maxima: dict[str, np.ndarray] | None = None
    alpha: float = 0.5
    float_channels: int = 0


def to_integer_gemm(model: onnx.ModelProto, recipe: IntegerGemmRecipe | None = None) -> int:
    """Rewrite the MatMulNBits of `model` (in place) as row-quantized MatMulInteger; returns how many."""
    recipe = recipe or IntegerGemmRecipe()
    inits = {t.name: t for t in model.graph.initializer}
    nodes = [n for n in model.graph.node if n.op_type == "MatMulNBits"
             and (recipe.roles is None or any(role in n.name for role in recipe.roles))]
    corrections = {n.name: _minimum_correction(model, n, inits) for n in nodes}
    weights = {n.name: dequantized_weights(n, inits, corrections[n.name] and corrections[n.name][2]) for n in nodes}
    inputs = _prepared_inputs(nodes, weights, recipe)
    replaced: dict[str, list[onnx.NodeProto]] = {}
    dropped: set[str] = set()
    for node in nodes:
        correction, prepared, name = corrections[node.name], inputs[node.input[0]], node.name + ".igemm"
        w = weights[node.name]
        new = prepared.nodes  # the first product of an input prepares it; the others reuse it
        prepared.nodes = []
        parts = []
        if prepared.float_channels is not None:
            rows = prepared.float_channels
            model.graph.initializer.append(numpy_helper.from_array(w[rows].astype(np.float32), f"{name}.float_rows"))
            new += [helper.make_node("Mul", [prepared.float_input, f"{name}.float_rows"], [f"{name}.float_terms"]),
                    helper.make_node("ReduceSum", [f"{name}.float_terms", "igemm.channel_axis"],
                                     [f"{name}.float_part"], keepdims=0)]
            parts.append(f"{name}.float_part")
            w = w.copy()
            w[rows] = 0
        if prepared.smoothing is not None:
            w = w * prepared.smoothing[:, None]
        codes, column_scale = int8_columns(w)
        model.graph.initializer.extend([numpy_helper.from_array(codes, f"{name}.weight"),
                                        numpy_helper.from_array(column_scale, f"{name}.column_scale")])
        out = correction[0].output[0] if correction else node.output[0]
        integer_out = f"{name}.integer_part" if parts else out
        new += [helper.make_node("MatMulInteger", [f"{prepared.quantized}.q", f"{name}.weight", "igemm.zero_point"],
                                 [f"{name}.sum"], name=name),
                helper.make_node("Cast", [f"{name}.sum"], [f"{name}.sum_f"], to=onnx.TensorProto.FLOAT),
                helper.make_node("Mul", [f"{prepared.quantized}.rowscale", f"{name}.column_scale"], [f"{name}.scale"]),
                helper.make_node("Mul", [f"{name}.sum_f", f"{name}.scale"], [integer_out])]
        if parts:
            new.append(helper.make_node("Add", [integer_out, *parts], [out]))
        replaced[node.name] = new
        if correction:
            dropped |= {correction[0].name, correction[1].name}
    if not replaced:
        return 0
    constants = {"igemm.inv127": np.array(1 / 127, np.float32), "igemm.tiny": np.array(1e-30, np.float32),
                 "igemm.one": np.array(1, np.float32), "igemm.zero_point": np.array(ZERO_POINT, np.uint8),
                 "igemm.channel_axis": np.array([-2], np.int64)}
    model.graph.initializer.extend(numpy_helper.from_array(v, k) for k, v in constants.items())
    for prepared in inputs.values():
        model.graph.initializer.extend(prepared.initializers)
    ordered = []
    for node in model.graph.node:
        ordered += replaced.get(node.name, [] if node.name in dropped else [node])
    _keep_needed(model, ordered)
    return len(replaced)


@dataclass
class _PreparedInput:
    quantized: str  # the tensor whose row quantization (.q, .rowscale) the products read
    nodes: list[onnx.NodeProto] = field(default_factory=list)
    initializers: list[onnx.TensorProto] = field(default_factory=list)
    smoothing: np.ndarray | None = None  # s per channel: the weights' rows are multiplied by it
    float_channels: np.ndarray | None = None  # channels kept in float
    float_input: str = ""  # (.., T, channels, 1): those channels of x


def _prepared_inputs(nodes: list[onnx.NodeProto], weights: dict[str, np.ndarray],
                     recipe: IntegerGemmRecipe) -> dict[str, _PreparedInput]:
    """Per input tensor: the nodes that split, smooth and row-quantize it, once for every product reading it."""
    row_max: dict[str, np.ndarray] = {}
    for node in nodes:
        row = np.abs(weights[node.name]).max(axis=1)
        row_max[node.input[0]] = np.maximum(row_max.get(node.input[0], row), row)
    prepared = {}
    for x, weight_max in row_max.items():
        current, p = x, _PreparedInput(quantized=x)
        maxima = (recipe.input_maxima or {}).get(x)
        if maxima is not None and recipe.float_channels:
            picked = np.sort(np.argsort(maxima)[-recipe.float_channels:]).astype(np.int64)
            keep = np.ones(maxima.size, np.float32)
            keep[picked] = 0
            p.initializers += [numpy_helper.from_array(picked.reshape(-1, 1), f"{x}.float_index"),
                               numpy_helper.from_array(keep, f"{x}.integer_mask")]
            p.nodes += [helper.make_node("Gather", [x, f"{x}.float_index"], [f"{x}.float_channels"], axis=-1),
                        helper.make_node("Mul", [x, f"{x}.integer_mask"], [f"{x}.integer_channels"])]
            p.float_channels, p.float_input, current = picked, f"{x}.float_channels", f"{x}.integer_channels"
            maxima = maxima * keep
        if maxima is not None:
            s = np.maximum(maxima, 1e-8) ** recipe.alpha / np.maximum(weight_max, 1e-8) ** (1 - recipe.alpha)
            p.smoothing = np.clip(s, 1e-4, 1e4).astype(np.float32)
            p.initializers.append(numpy_helper.from_array(1 / p.smoothing, f"{x}.smoothing"))
            p.nodes.append(helper.make_node("Mul", [current, f"{x}.smoothing"], [f"{x}.smoothed"]))
            current = f"{x}.smoothed"
        p.nodes += _row_quantization(current)
        p.quantized = current
        prepared[x] = p
    return prepared


def _keep_needed(model: onnx.ModelProto, nodes: list[onnx.NodeProto]) -> None:
    """Set the graph's nodes, leaving out those no output needs (the block sums) and initializers no node reads."""
    needed = {o.name for o in model.graph.output}
    kept = []
    for node in reversed(nodes):
        if any(out in needed for out in node.output):
            kept.append(node)
            needed |= set(node.input)
    del model.graph.node[:]
    model.graph.node.extend(kept[::-1])
    used = {name for node in kept for name in node.input}
    initializers = [t for t in model.graph.initializer if t.name in used]
    del model.graph.initializer[:]
    model.graph.initializer.extend(initializers)

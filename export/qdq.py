"""Static QDQ quantization of a float32 bundle for the Qualcomm HTP: 16-bit activations, 8-bit weights.

The pass is onnxruntime's own static quantization for the QNN EP (`get_qnn_qdq_config` + `quantize`); each
measured fix below is one of its tensor-level overrides or excluded nodes.
Recipe (each step is a measured fix, environment.md and benchmarks/results/quant/qdq_recipe.md):
  - every RMSNorm becomes one `SimplifiedLayerNormalization` node: written as pow/mean/rsqrt, the HTP's
    16-bit Reciprocal is wrong for small inputs and the logits decorrelate (0.69);
  - the residual stream, the norms that read it and the few nodes around outlier-dominated tensors stay
    float, which the HTP runs in fp16 (qdq_float16.py): a 16-bit grid cannot hold SmolLM2's one huge
    channel and its ordinary values at once;
  - calibration runs the float bundle through the runtime's own Engine on the model's own greedy answers to
    the project's prompts (models/distill_data.py; never Spec-Bench), or on CALIBRATION_TEXTS, with the mask
    value set to QDQ_MASK_VALUE (-1e9 in the calibration ruins even the CPU QDQ graph); the bundle then
    records that mask value, so the host builds the same biases it was calibrated with;
  - known ranges are fixed rather than observed: rope tables [-1, 1], bias [mask, 0];
  - each layer's past_key / new_key (and value) pair gets ONE range, the union of both observed ranges, so a
    new entry the host copies into the cache is quantized on the same grid it came out on;
  - weights: 8-bit per output channel, symmetric (per-tensor 8-bit changed greedy output from the first token);
    16-bit for the most sensitive matrices (config.wide_weights: the LM head, v and down projections);
    the 8-bit ones rounded by GPTQ on the calibration inputs (qdq_gptq.py) rather than to nearest;
  - one set of activation encodings for every graph width: the widest graph is calibrated, the others take
    its encodings, so a row computes the same numbers whatever the width of the call it is in (a drafter
    verifies with wide graphs what plain decoding computes with the narrow one: separately calibrated widths
    gave different greedy tokens on the HTP simulator).
Graph I/O stays float32: the QNN EP (or the CPU) quantizes at the boundary with the recorded encodings,
which the manifest carries per graph.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass

import numpy as np
import onnx
from onnx import numpy_helper

from mtpedge.runtime.contract import new_key_name, new_value_name, past_key_name, past_value_name

log = logging.getLogger(__name__)

QDQ_MASK_VALUE = -100.0
QDQ_OPSET = 21  # SimplifiedLayerNormalization in the default domain; set by hand (the quantizer's upgrade fails)
CALIBRATION_TEXTS = (
    "<|im_start|>user\nWhat is the capital of France? Answer in one sentence.<|im_end|>\n<|im_start|>assistant\n"
    "The capital of France is Paris, which is also its largest city.<|im_end|>\n",
    "<|im_start|>user\nWrite a Python function that reverses a string.<|im_end|>\n<|im_start|>assistant\n"
    "def reverse(text):\n    return text[::-1]\n\nprint(reverse('hello'))  # olleh<|im_end|>\n",
    "Once upon a time, in a village at the edge of a great forest, there lived a carpenter who made chairs that "
    "could not be broken. People came from far away to try, and every one of them went home surprised.",
    "Photosynthesis converts light energy into chemical energy: plants take in carbon dioxide and water and, "
    "using sunlight, produce glucose and oxygen. 1, 2, 3, 5, 8, 13, 21, 34, 55, 89.",
    "<|im_start|>user\nHow do I keep basil alive indoors?<|im_end|>\n<|im_start|>assistant\nGive it the sunniest "
    "window you have, at least six hours a day. Water when the top centimetre of soil is dry, never leave the pot "
    "standing in water, and pinch off flower buds so the plant keeps making leaves. Rotate the pot every few days "
    "so it grows evenly, and harvest from the top to make it bushier.<|im_end|>\n",
    "The meeting was moved to Thursday at 3 pm because the projector in room 204 is broken. Please bring the "
    "quarterly figures: revenue rose 12% to 4.2 million, costs fell by 3%, and the new office in Lyon opened on "
    "the first of June. Questions about travel expenses go to Maria before Wednesday evening.",
    "SELECT name, COUNT(*) AS orders FROM customers JOIN orders ON orders.customer_id = customers.id "
    "WHERE orders.created_at >= '2024-01-01' GROUP BY name HAVING COUNT(*) > 3 ORDER BY orders DESC;\n"
    "for (int i = 0; i < n; ++i) { sum += values[i] * weights[i]; }\n",
)


CALIBRATION_SOURCES = ("self-distilled", "texts")
CALIBRATION_PROMPTS = 16  # prompts of models/distill_data.py answered by the float model for calibration
CALIBRATION_ANSWER_TOKENS = 64


@dataclass(frozen=True)
class QdqConfig:
    activation_bits: int = 16
    weight_bits: int = 8
    per_channel: bool = True
    mask_value: float = QDQ_MASK_VALUE
    samples_per_graph: int = 24  # calibration calls of the widest graph (the others take its encodings)
    calibration: str = "self-distilled"  # the model's own answers to the project's prompts, or "texts"
    float16_stream: bool = True  # residual stream + its norms unquantized: fp16 on the HTP (qdq_float16.py)
    outlier_ratio: float = 50.0  # around tensors with max|x| > ratio x p99.9|x|: fp16 too; 0 = none
    # each layer's attention core (q.K .. probabilities.V) fp16 (qdq_float16.attention_core_nodes): on the HTP
    # simulator top-1 vs float32 96.39% -> 97.78% held text, 94.59% -> 97.45% Spec-Bench, perplexity +1.55% ->
    # +0.21% / +2.71% -> +0.15% (benchmarks/results/quant/smollm2.md, smollm2-qdq512-attfp16-quality-htp.json)
    float_attention: bool = True
    # weights of these modules (a path segment of their MatMul's name, as the exporter writes Hugging Face
    # module names) get 16-bit per-channel weights: the most sensitive ones (qdq_recipe.md)
    wide_weights: tuple[str, ...] = ("lm_head", "v_proj", "down_proj")
    gptq: bool = True  # round the 8-bit weights by GPTQ on the calibration inputs (qdq_gptq.py)
    smooth_alpha: float = 0.0  # SmoothQuant strength for the norms' outputs (qdq_smooth.py); 0 = not smoothed

    def __post_init__(self) -> None:
        if self.calibration not in CALIBRATION_SOURCES:
            raise ValueError(f"QDQ calibration must be one of {CALIBRATION_SOURCES}, got {self.calibration!r}")
        if self.activation_bits not in (8, 16) or self.weight_bits not in (4, 8):
            raise ValueError(f"QDQ supports 8/16-bit activations and 4/8-bit weights, got a{self.activation_bits}"
                             f"w{self.weight_bits}")
        if not 0.0 <= self.smooth_alpha < 1.0:
            raise ValueError(f"QDQ smooth_alpha must be in [0, 1) (0 = no smoothing), got {self.smooth_alpha}")
        if self.mask_value >= 0 or self.mask_value < -1e4:
            raise ValueError(f"the QDQ mask value must be a negative number of moderate size (about -100): "
                             f"{self.mask_value} would take the whole 16-bit range of the bias")

    @property
    def label(self) -> str:
        return f"qdq-a{self.activation_bits}w{self.weight_bits}"


def weight_bits(node_name: str, config: QdqConfig) -> int:
    """16 for a MatMul of one of config.wide_weights (a segment of its node name), else config.weight_bits."""
    return 16 if set(node_name.split("/")) & set(config.wide_weights) else config.weight_bits


def fuse_rms_norms(model: onnx.ModelProto) -> int:
    """Replace x * (1 / sqrt(mean(x^2) + eps)) * w (as traced) by SimplifiedLayerNormalization(x, w); returns count.

    The fusion is onnxruntime's own (its transformer optimizer's FusionSimplifiedLayerNormalization; the QNN
    preprocessing's `fuse_layernorm` only fuses mean-subtracting LayerNorms and leaves RMSNorms alone). Each
    fused node is named after the Mul it replaces, so names agree across widths (float16_nodes picks nodes by
    name on the widest graph), and the opset is set to QDQ_OPSET by hand.
    """
    from onnxruntime.transformers.fusion_simplified_layernorm import FusionSimplifiedLayerNormalization
    from onnxruntime.transformers.onnx_model import OnnxModel

    wrapped = OnnxModel(model)
    order = {n.output[0]: i for i, n in enumerate(model.graph.node)}  # a fused node takes its last Mul's place
    before = {n.output[0] for n in model.graph.node if n.op_type == "SimplifiedLayerNormalization"}
    FusionSimplifiedLayerNormalization(wrapped).apply()
    wrapped.prune_graph(allow_remove_graph_inputs=False)
    fused = [n for n in model.graph.node if n.op_type == "SimplifiedLayerNormalization" and n.output[0] not in before]
    for node in fused:
        node.name = f"{node.output[0].removesuffix('_output_0')}.rmsnorm"
    if not fused:
        return 0
    _set_nodes(model.graph, sorted(model.graph.node, key=lambda n: order[n.output[0]]))
    _drop_unused_constants(model.graph)
    for opset in model.opset_import:
        if opset.domain in ("", "ai.onnx"):
            opset.version = QDQ_OPSET
    return len(fused)


def _drop_unused_constants(graph: onnx.GraphProto) -> None:
    used = {name for node in graph.node for name in node.input} | {o.name for o in graph.output}
    keep = [n for n in graph.node if n.op_type != "Constant" or n.output[0] in used]
    if len(keep) != len(graph.node):
        _set_nodes(graph, keep)


def _set_nodes(graph: onnx.GraphProto, nodes: list[onnx.NodeProto]) -> None:
    """Make `nodes` the graph's node list (copies: they may be the graph's own, which clearing it frees)."""
    clones = []
    for node in nodes:
        clone = onnx.NodeProto()
        clone.CopyFrom(node)
        clones.append(clone)
    del graph.node[:]
    graph.node.extend(clones)


MOVES_DATA = {"Reshape", "Transpose", "Squeeze", "Unsqueeze", "Identity"}  # the quantizer shares their encodings


def data_movement_chain(model: onnx.ModelProto, name: str) -> list[str]:
    """`name` and the tensors that only move its data: producers back from an output, consumers on from an input.

    The quantizer gives such tensors one shared encoding, decided at the chain's far end; an override must
    therefore name every tensor of the chain to take effect.
    """
    producer = {out: node for node in model.graph.node for out in node.output}
    consumers: dict[str, list[onnx.NodeProto]] = {}
    for node in model.graph.node:
        for tensor in node.input:
            consumers.setdefault(tensor, []).append(node)
    chain = [name]
    node = producer.get(name)
    while node is not None and node.op_type in MOVES_DATA:  # backwards from a graph output
        chain.append(node.input[0])
        node = producer.get(node.input[0])
    frontier = [name]
    while frontier:  # forwards from a graph input
        for node in consumers.get(frontier.pop(), []):
            if node.op_type in MOVES_DATA:
                chain.append(node.output[0])
                frontier.append(node.output[0])
    return chain


def tied_kv_overrides(model: onnx.ModelProto, ranges: dict[str, tuple[float, float]],
                      num_layers: int) -> dict[str, list[dict]]:
    """One (rmin, rmax) per layer's key pair and value pair: the union of the cache input and the new output."""
    overrides = {}
    for layer in range(num_layers):
        for past, new in ((past_key_name(layer), new_key_name(layer)), (past_value_name(layer), new_value_name(layer))):
            lo = min(ranges[past][0], ranges[new][0], 0.0)
            hi = max(ranges[past][1], ranges[new][1], 0.0)
            for tensor in data_movement_chain(model, past) + data_movement_chain(model, new):
                overrides[tensor] = [{"rmin": np.float32(lo), "rmax": np.float32(hi)}]
    return overrides


RENAMED_OUTPUT = "_QuantizeLinear_Input"  # the quantizer's suffix for the tensor behind a graph output's Q/DQ


def activation_encodings(model: onnx.ModelProto) -> dict[str, dict]:
    """scale / zero point / type of every activation a QDQ model quantizes, by the float tensor's name."""
    inits = {t.name: t for t in model.graph.initializer}
    found: dict[str, dict] = {}
    for node in model.graph.node:
        if node.op_type != "QuantizeLinear" or node.input[0] in inits or len(node.input) < 3:
            continue
        scale, zero = (numpy_helper.to_array(inits[name]) for name in node.input[1:3])
        if scale.size == 1:  # the first quantization of a tensor (a later one is a type conversion)
            # a graph output's producer writes to a renamed tensor; overrides use the output's own name
            name = node.input[0].removesuffix(RENAMED_OUTPUT)
            found.setdefault(name, {"scale": float(scale), "zero_point": int(zero), "dtype": str(zero.dtype)})
    return found


def fixed_encoding_overrides(encodings: dict[str, dict]) -> dict[str, list[dict]]:
    """Tensor overrides that give each named activation exactly these encodings (see activation_encodings)."""
    from onnxruntime.quantization import QuantType

    types = {"uint8": QuantType.QUInt8, "uint16": QuantType.QUInt16, "int8": QuantType.QInt8,
             "int16": QuantType.QInt16}
    return {name: [{"scale": np.array(e["scale"], np.float32), "zero_point": np.array(e["zero_point"], e["dtype"]),
                    "quant_type": types[e["dtype"]]}] for name, e in encodings.items()}


def tied_kv_fixed_overrides(model: onnx.ModelProto, fixed: dict[str, dict], num_layers: int) -> dict[str, list[dict]]:
    """The widest graph's one encoding per key pair and value pair, on every tensor of this graph's chains
    (the quantizer may place the QuantizeLinear of a chain on another of its tensors in another width)."""
    encodings = {}
    for layer in range(num_layers):
        for past, new in ((past_key_name(layer), new_key_name(layer)), (past_value_name(layer), new_value_name(layer))):
            chain = data_movement_chain(model, past) + data_movement_chain(model, new)
            known = [fixed[tensor] for tensor in chain if tensor in fixed]
            if known:
                encodings.update({tensor: known[0] for tensor in chain})
    return fixed_encoding_overrides(encodings)


def io_encodings(model: onnx.ModelProto) -> dict[str, dict]:
    """scale / zero point / type of each graph input's QuantizeLinear and each output's DequantizeLinear."""
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer if t.data_location != 1}
    inputs = {i.name for i in model.graph.input}
    outputs = {o.name for o in model.graph.output}
    origin = {}  # tensor moved from a graph input -> that input
    for name in inputs:
        for tensor in data_movement_chain(model, name):
            origin.setdefault(tensor, name)
    found = {}
    for node in model.graph.node:
        io = None
        if node.op_type == "QuantizeLinear" and node.input[0] in origin:
            io = origin[node.input[0]]
        elif node.op_type == "DequantizeLinear" and node.output[0] in outputs:
            io = node.output[0]
        if io is None or io in found:
            continue
        scale, zero = inits.get(node.input[1]), inits.get(node.input[2]) if len(node.input) > 2 else None
        found[io] = {"scale": float(scale) if scale is not None else None,
                     "zero_point": int(zero) if zero is not None else 0,
                     "dtype": str(zero.dtype) if zero is not None else "uint8"}
    return found


def config_dict(config: QdqConfig) -> dict:
    return asdict(config)

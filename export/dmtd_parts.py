"""The decoder cut at a layer boundary into part graphs, each with the host KV of its own layers.

    thinking   inputs_embeds (1,N,d) + contract inputs + past of layers [0, L-D)   -> hidden (1,N,d) + new KV
    decoding   hidden_in     (1,N,d) + contract inputs + past of its D layers      -> logits (1,N,V) + new KV

Everything else follows runtime/contract.py (whole-cache past, additive bias (1,1,N,C+N), host RoPE); KV
names are numbered from 0 inside each part, so each part's host cache is an ordinary KVCache. Running the
thinking part and then the decoding part (base layers) is the full model: tests check that against the
full graph. The same cut serves models too large for one NPU context.
"""

from __future__ import annotations

import io
import warnings
from dataclasses import dataclass

import onnx
import torch
from torch import nn

from mtpedge.runtime.contract import GraphShape

from ..models.decoder import Decoder
from .onnx_graphs import OPSET


class ThinkingPart(nn.Module):
    def __init__(self, decoder: Decoder, num_layers: int) -> None:
        super().__init__()
        self.layers = decoder.model.layers[:num_layers]

    def forward(self, inputs_embeds, attention_bias, rope_cos, rope_sin, *past):
        h, new_kv = inputs_embeds, []
        for i, layer in enumerate(self.layers):
            h, k, v = layer(h, attention_bias, rope_cos, rope_sin, past[2 * i], past[2 * i + 1])
            new_kv += [k, v]
        return (h, *new_kv)


class DecodingPart(nn.Module):
    """Decoder layers + final norm + LM head over a hidden-state input."""

    def __init__(self, layers: nn.ModuleList, norm: nn.Module, lm_head: nn.Module) -> None:
        super().__init__()
        self.layers, self.norm, self.lm_head = layers, norm, lm_head

    def forward(self, hidden_in, attention_bias, rope_cos, rope_sin, *past):
        h, new_kv = hidden_in, []
        for i, layer in enumerate(self.layers):
            h, k, v = layer(h, attention_bias, rope_cos, rope_sin, past[2 * i], past[2 * i + 1])
            new_kv += [k, v]
        return (self.lm_head(self.norm(h)), *new_kv)


@dataclass(frozen=True)
class PartShape:
    """Shapes of one part graph: the contract's, with its own layer count and first input / output."""

    role: str  # thinking | base_decoding | dmtd_decoding
    shape: GraphShape  # num_layers = the part's layers

    @property
    def is_thinking(self) -> bool:
        return self.role == "thinking"

    def input_shapes(self) -> dict[str, list[int]]:
        shapes = self.shape.input_shapes()
        if not self.is_thinking:
            shapes = {("hidden_in" if k == "inputs_embeds" else k): v for k, v in shapes.items()}
        return shapes

    def output_shapes(self) -> dict[str, list[int]]:
        shapes = self.shape.output_shapes()
        if self.is_thinking:
            shapes.pop("logits")
            shapes = {"hidden": [1, self.shape.width, self.shape.hidden_size], **shapes}
        return shapes


def trace_part(module: nn.Module, part: PartShape) -> onnx.ModelProto:
    """One part at one static width as an in-memory ONNX model (weights inline), I/O checked."""
    inputs = tuple(torch.zeros(dims, dtype=torch.float32) for dims in part.input_shapes().values())
    buffer = io.BytesIO()
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")  # TorchScript exporter deprecation: same choice as onnx_graphs.trace_graph
        torch.onnx.export(module, inputs, buffer, input_names=list(part.input_shapes()),
                          output_names=list(part.output_shapes()), opset_version=OPSET, do_constant_folding=True,
                          dynamo=False)
    model = onnx.load_from_string(buffer.getvalue())

    def dims(values) -> dict[str, list[int]]:
        return {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim] for v in values}

    if dims(model.graph.input) != part.input_shapes() or dims(model.graph.output) != part.output_shapes():
        raise RuntimeError(f"traced {part.role} graph of width {part.shape.width} has unexpected inputs/outputs")
    return model

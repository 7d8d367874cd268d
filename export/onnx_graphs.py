"""Trace the reference decoder into static-shape ONNX graphs, and move their weights into one shared file.

Each width is traced separately (static shapes); the traced graphs hold identical weight tensors, which
`share_weights` writes once into `weights.data` and points every graph at, so a bundle with four graphs
is barely larger than one.
"""

from __future__ import annotations

import hashlib
import logging
import warnings
from pathlib import Path

import onnx
import torch
from onnx import numpy_helper
from onnx.external_data_helper import set_external_data

from mtpedge.runtime.contract import CACHE_SLOTS, GraphShape

from ..models.decoder import Decoder

log = logging.getLogger(__name__)

OPSET = 17
INLINE_LIMIT = 1024  # bytes: smaller tensors stay inside the graph file
ALIGNMENT = 4096  # offsets page-aligned, so the weights file can be memory-mapped


def example_inputs(shape: GraphShape) -> tuple[torch.Tensor, ...]:
    return tuple(torch.arange(shape.width).view(dims) if name == CACHE_SLOTS else torch.zeros(dims)
                 for name, dims in shape.input_shapes().items())


def trace_graph(decoder: Decoder, shape: GraphShape) -> onnx.ModelProto:
    """The decoder at one static width as an in-memory ONNX model (weights inline)."""
    import io

    buffer = io.BytesIO()
    with warnings.catch_warnings(), torch.no_grad():
        # the TorchScript exporter is deprecated but 2x faster to trace here and gives the same graph contract
        warnings.simplefilter("ignore")
        torch.onnx.export(
            decoder,
            example_inputs(shape),
            buffer,
            input_names=list(shape.input_shapes()),
            output_names=list(shape.output_shapes()),
            opset_version=OPSET,
            do_constant_folding=True,
            dynamo=False,
        )
    return onnx.load_from_string(buffer.getvalue())


class SharedWeights:
    """Appends each distinct large initializer once to a weights file and points graphs at it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offsets: dict[str, tuple[int, int]] = {}  # content hash -> (offset, length)
        self.file = open(path, "wb")

    def externalize(self, model: onnx.ModelProto) -> None:
        for tensor in model.graph.initializer:
            if not tensor.HasField("raw_data"):  # the exporter stores some folded constants as float_data
                tensor.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(tensor), tensor.name))
            data = tensor.raw_data
            if len(data) < INLINE_LIMIT:
                continue
            key = hashlib.sha1(data).hexdigest() + str(tensor.data_type) + str(list(tensor.dims))
            if key not in self.offsets:
                pad = -self.file.tell() % ALIGNMENT
                self.file.write(b"\0" * pad)
                self.offsets[key] = (self.file.tell(), len(data))
                self.file.write(data)
            offset, length = self.offsets[key]
            set_external_data(tensor, location=self.path.name, offset=offset, length=length)
            tensor.ClearField("raw_data")
            tensor.data_location = onnx.TensorProto.EXTERNAL

    def close(self) -> None:
        self.file.close()


def check_contract(model: onnx.ModelProto, shape: GraphShape) -> None:
    """The traced graph's I/O must be exactly the contract's names and static shapes."""

    def dims(values) -> dict[str, list[int]]:
        return {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim] for v in values}

    inputs, outputs = dims(model.graph.input), dims(model.graph.output)
    if inputs != shape.input_shapes() or outputs != shape.output_shapes():
        raise RuntimeError(f"traced graph of width {shape.width} breaks the graph contract: "
                           f"inputs {list(inputs)[:4]}..., outputs {list(outputs)[:4]}...")

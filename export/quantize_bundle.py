"""A float32 bundle -> a weight-quantized bundle (MatMulNBits), written atomically, with a quality report.

Two sources of quantized weights:
  "gguf"       the GGUF file the bundle was exported from: its own codes and scales, exactly (gguf_grid.py).
               GGUF tensors are matched to graph initializers by content (every row, bit for bit), so a
               permuted q/k matrix or a tied output layer is found, and a GGUF that is not the source fails.
  "int8/int4"  symmetric round-to-nearest blocks of the float weights (block_weights.py), for float sources.
The output layer's precision is its own setting: it holds a fifth of SmolLM2's weights and most of the
sensitivity of top-1.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

from mtpedge.runtime.contract import DEFAULT_MASK_VALUE, LORA_GATE
from mtpedge.runtime.kernels import RECIPE_VERSION

from .block_weights import BlockWeights, quantize_rtn
from .integer_gemm import to_integer_gemm
from .matmul_nbits import MatMulRewriter, weight_matmuls
from .native_attention import fuse_cache_attention
from .onnx_graphs import SharedWeights
from .quant_config import FINE_BLOCK, QuantConfig
from .staging import copy_host_files, float_source, staged_folder

log = logging.getLogger(__name__)

QUANT_WEIGHTS_FILE = "weights.data"


class WeightSource:
    """Chooses the BlockWeights of each float (K, N) initializer, once per distinct content."""

    def __init__(self, config: QuantConfig, gguf_path: Path | None) -> None:
        self.config = config
        self._cache: dict[tuple[str, bool], BlockWeights | None] = {}
        self.by_content: dict[bytes, tuple[object, ...]] = {}
        self.used: Counter = Counter()
        if config.weights == "gguf" or config.output_layer == "gguf":
            if gguf_path is None:
                raise ValueError("GGUF-exact quantization needs the GGUF file the bundle was exported from")
            from .gguf_grid import read_grid_tensors

            for tensor in read_grid_tensors(gguf_path).values():
                key = hashlib.sha1(b"".join(sorted(tensor.row_hashes))).digest()
                self.by_content[key] = (tensor, {h: i for i, h in enumerate(tensor.row_hashes)})

    def weights_for(self, weight_kn: np.ndarray, is_output: bool) -> BlockWeights | None:
        digest = hashlib.sha1(weight_kn.tobytes()).hexdigest()
        if (digest, is_output) not in self._cache:
            choice = self.config.weights
            if is_output and self.config.output_layer != "same":
                choice = self.config.output_layer
            self._cache[(digest, is_output)] = self._make(weight_kn, choice)
        return self._cache[(digest, is_output)]

    def _make(self, weight_kn: np.ndarray, choice: str) -> BlockWeights | None:
        weight = np.ascontiguousarray(weight_kn.T)  # (N, K): rows of W are columns of the graph's initializer
        if choice == "float32":
            self.used["float32"] += 1
            return None
        if choice in ("int8", "int4"):
            self.used[f"rtn-{choice}"] += 1
            return quantize_rtn(weight, 8 if choice == "int8" else 4, self.config.block_size)
        rows = [hashlib.sha1(row.tobytes()).digest() for row in weight]
        found = self.by_content.get(hashlib.sha1(b"".join(sorted(rows))).digest())
        if found is None:
            raise ValueError(f"a ({weight.shape[1]} x {weight.shape[0]}) weight of the graph matches no quantized "
                             "tensor of the GGUF file: pass the GGUF the bundle was exported from, or use "
                             "--precision int8/int4")
        tensor, row_index = found
        order = np.array([row_index[h] for h in rows])
        w = tensor.weights
        self.used[f"gguf:{tensor.qtype}"] += 1
        return BlockWeights(w.codes[order], w.scales[order], None if w.offsets is None else w.offsets[order],
                            w.bits, w.block_size, w.source)


def _read_external(tensor: onnx.TensorProto, folder: Path) -> np.ndarray:
    """An initializer's value, reading external data without loading the whole weights file."""
    if tensor.data_location != onnx.TensorProto.EXTERNAL:
        return numpy_helper.to_array(tensor)
    info = {entry.key: entry.value for entry in tensor.external_data}
    dtype = onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type)
    offset, length = int(info.get("offset", 0)), int(info["length"])
    with open(folder / info["location"], "rb") as f:
        f.seek(offset)
        data = f.read(length)
    return np.frombuffer(data, dtype=dtype).reshape(tuple(tensor.dims))


def lora_matmuls(model: onnx.ModelProto) -> set[str]:
    """The names of an MTP adapter graph's gated-LoRA MatMuls, found by structure: each projection's low-rank
    product `x @ A` feeds a Mul by the (unsqueezed) `lora_gate` input, whose result feeds `@ B`. Empty for a
    graph without that input."""
    nodes = model.graph.node
    produced = {out: node for node in nodes for out in node.output}
    matmuls_of: dict[str, list[str]] = {}  # input name -> the MatMuls reading it
    for node in nodes:
        if node.op_type == "MatMul":
            for name in node.input:
                matmuls_of.setdefault(name, []).append(node.name)
    gate = {LORA_GATE} | {out for node in nodes if node.op_type == "Unsqueeze" and node.input[0] == LORA_GATE
                          for out in node.output}
    found = set()
    for node in nodes:
        if node.op_type != "Mul" or not gate & set(node.input):
            continue
        low = next((produced.get(name) for name in node.input if name not in gate), None)
        if low is not None and low.op_type == "MatMul":
            found.add(low.name)
        found.update(matmuls_of.get(node.output[0], []))
    return found


def quantize_graph(src_file: Path, source: WeightSource, weights_file: SharedWeights,
                   mask_value: float = DEFAULT_MASK_VALUE) -> tuple[onnx.ModelProto, int]:
    """One graph's weight MatMuls as MatMulNBits (or BlockMatMul, with each layer's attention as one CacheAttention,
    on mtpedge's kernels). An MTP adapter graph's LoRA MatMuls stay float32: they are small, and the GGUF holds no
    grid for them."""
    model = onnx.load(str(src_file), load_external_data=False)
    folder = src_file.parent
    rewriter = MatMulRewriter(model)
    lora = lora_matmuls(model)
    # MatMuls of one input whose blocks run on one kernel become one MatMulNBits (matmul_nbits.py): grouped by
    # input, K, bits, block, accuracy level and minima, in graph order
    groups: dict[tuple, list[tuple[onnx.NodeProto, BlockWeights]]] = {}
    for matmul in weight_matmuls(model):
        if matmul.node.name in lora:
            continue
        init = next(t for t in model.graph.initializer if t.name == matmul.weight_name)
        weights = source.weights_for(_read_external(init, folder), matmul.is_output_layer)
        if weights is not None:
            is_8bit = weights.bits == 8
            if source.config.is_fine(matmul.node.name) and weights.block_size > FINE_BLOCK:
                weights = weights.split_blocks(FINE_BLOCK)
            level = 4 if is_8bit else source.config.level_for(matmul.node.name)
            shared = matmul.node.input[0] if source.config.side_by_side else matmul.node.output[0]
            key = (level, shared, weights.shape[1], weights.bits, weights.block_size, weights.offsets is None)
            groups.setdefault(key, []).append((matmul.node, weights))
    native = source.config.kernels == "mtpedge"
    for (level, *_), members in groups.items():
        rewriter.replace_side_by_side([node for node, _ in members], [w for _, w in members], level, native)
    replaced = sum(len(members) for members in groups.values())
    rewriter.finish()
    if native:
        fuse_cache_attention(model, mask_value)
    if source.config.integer_gemm:
        to_integer_gemm(model)
    for tensor in model.graph.initializer:  # what stays float comes along into the new weights file
        if tensor.data_location == onnx.TensorProto.EXTERNAL:
            value = _read_external(tensor, folder)
            tensor.CopyFrom(numpy_helper.from_array(value, tensor.name))
    weights_file.externalize(model)
    return model, replaced


def quantize_bundle(
    src: str | Path,
    out_dir: str | Path,
    config: QuantConfig | None = None,
    gguf_path: str | Path | None = None,
    progress: Callable[[str], None] | None = None,
) -> Path:
    """Write a quantized copy of the float bundle `src` into `out_dir` (replaced only once complete)."""
    config = config or QuantConfig()
    say = progress or log.info
    src, out_dir = Path(src), Path(out_dir)
    manifest = float_source(src, "quantization", adapter_graphs=True)
    started = time.perf_counter()
    source = WeightSource(config, Path(gguf_path) if gguf_path else None)
    if source.by_content:
        say(f"read {len(source.by_content)} quantized GGUF tensors ({time.perf_counter() - started:.1f} s)")
    with staged_folder(out_dir, "quantizing") as tmp:  # not export's temporary name: export calls this
        copy_host_files(src, manifest, tmp)
        shared = SharedWeights(tmp / QUANT_WEIGHTS_FILE)
        entries = []
        try:
            for i, entry in enumerate(manifest.graphs, 1):
                model, replaced = quantize_graph(src / entry.file, source, shared, manifest.mask_value)
                onnx.save_model(model, tmp / entry.file)
                entries.append(replace(entry, precision=config.label))
                op = "BlockMatMul" if config.kernels == "mtpedge" else "MatMulNBits"
                say(f"[{i}/{len(manifest.graphs)}] quantized {entry.name}: {replaced} MatMuls -> {op}")
        finally:
            shared.close()
        info = {"config": asdict(config), "tensors": dict(source.used), "float_bundle_bytes": _bundle_bytes(src),
                "bytes": _bundle_bytes(tmp), "source": str(gguf_path) if gguf_path else None,
                **({"kernels_recipe": RECIPE_VERSION} if config.kernels == "mtpedge" else {})}
        new = replace(manifest, graphs=entries, extras={**manifest.extras, "quantization": info})
        say(f"weights: {info['bytes'] / 1e6:.0f} MB (float32 bundle {info['float_bundle_bytes'] / 1e6:.0f} MB); "
            f"tensors {dict(source.used)}")
        from .quality import write_manifest_with_quality

        write_manifest_with_quality(tmp, src, new, config.quality_report, say)
    say(f"quantized bundle written to {out_dir} ({time.perf_counter() - started:.1f} s)")
    return out_dir


def _bundle_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.iterdir() if p.is_file())

"""A float32 bundle -> a QDQ bundle for the HTP (see qdq.py for the recipe), calibrated through the runtime."""

from __future__ import annotations

import logging
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import onnx

from mtpedge.runtime.bundle import GraphEntry
from mtpedge.runtime.contract import new_key_name, new_value_name
from mtpedge.runtime.drafters import single_decode_graph
from mtpedge.runtime.engine import Engine
from mtpedge.runtime.generate import generate

from .onnx_graphs import SharedWeights, drop_present_outputs
from .qdq import (
    CALIBRATION_ANSWER_TOKENS,
    CALIBRATION_PROMPTS,
    CALIBRATION_TEXTS,
    QdqConfig,
    activation_encodings,
    config_dict,
    fixed_encoding_overrides,
    fuse_rms_norms,
    io_encodings,
    tied_kv_fixed_overrides,
    tied_kv_overrides,
    weight_bits,
)
from .qdq_float16 import activation_statistics, float16_nodes
from .qdq_gptq import apply_rounded, gptq_weights
from .qdq_smooth import apply_smoothing, smoothing_factors
from .quality import write_manifest_with_quality
from .staging import copy_host_files, float_source, staged_folder

log = logging.getLogger(__name__)


class RecordingEngine:
    """Runs the float bundle with the QDQ mask value and keeps every call's feeds and K/V outputs per width."""

    def __init__(self, folder: Path, mask_value: float) -> None:
        self.engine = Engine.load(folder, mask_value=mask_value)  # calibrate with the bias the QDQ bundle will get
        self.calls: dict[int, list[tuple[dict, dict]]] = {}
        graphs = self.engine.graphs
        original = graphs.run

        def run(entry, feeds, n_real):  # a wrapper, so that the Engine's own feed building is what we record
            out = original(entry, feeds, n_real)
            outputs = {new_key_name(i): k for i, k in enumerate(out.new_keys)}
            outputs.update({new_value_name(i): v for i, v in enumerate(out.new_values)})
            self.calls.setdefault(entry.width, []).append(({k: v.copy() for k, v in feeds.items()}, outputs))
            return out

        graphs.run = run

    def run_stream(self, stream: list[int], width: int, limit: int) -> list[tuple[dict, dict]]:
        """`limit` teacher-forced blocks of `width` tokens (chains) over the token stream, cycled.

        One stream, cycled, rather than one short text at a time: a wide graph then still gets `limit` calls,
        and later calls see a filled cache, as prefill chunks after the first do (calibrating a 64-wide
        prefill graph on 4 empty-cache calls left SmolLM2's QDQ at 31% top-1).
        """
        engine = self.engine
        self.calls[width] = []
        engine.reset()
        start = 0
        while len(self.calls[width]) < limit:
            if engine.cache.free < width:
                engine.reset()
            part = np.asarray([stream[(start + i) % len(stream)] for i in range(width)])
            start += width
            out = engine.run_block(engine.embed(part), np.arange(-1, part.size - 1))
            engine.cache.commit_accepted_kv(out.new_keys, out.new_values, np.arange(part.size))
        engine.reset()
        return self.calls[width][:limit]


class _Reader:
    """onnxruntime's CalibrationDataReader over recorded feeds."""

    def __init__(self, feeds: list[dict]) -> None:
        self._feeds = iter(feeds)

    def get_next(self):
        return next(self._feeds, None)


def observed_ranges(calls: list[tuple[dict, dict]]) -> dict[str, tuple[float, float]]:
    ranges: dict[str, tuple[float, float]] = {}
    for feeds, outputs in calls:
        for name, value in {**feeds, **outputs}.items():
            lo, hi = float(value.min()), float(value.max())
            old = ranges.get(name, (lo, hi))
            ranges[name] = (min(lo, old[0]), max(hi, old[1]))
    return ranges


def fused_float_graph(float_file: Path) -> onnx.ModelProto:
    """The float graph with shapes inferred and every RMSNorm fused into one node (qdq.fuse_rms_norms)."""
    model = onnx.load(str(float_file))
    # types of every intermediate tensor, inferred before the fusion brings in a non-standard op:
    # the calibrator only observes tensors whose type it knows
    model = onnx.shape_inference.infer_shapes(model)
    fused = fuse_rms_norms(model)
    log.info("%s: %d RMSNorms fused", float_file.name, fused)
    return model


def recipe_overrides(model: onnx.ModelProto, calls: list[tuple[dict, dict]], num_layers: int, config: QdqConfig,
                     fixed: dict[str, dict] | None = None) -> dict[str, list[dict]]:
    """The quantizer's tensor overrides: fixed ranges, tied K/V, per-channel weights, and with `fixed` (the
    activation_encodings of another width's QDQ graph) those encodings instead of this graph's calibration."""
    from onnxruntime.quantization import QuantType

    overrides = tied_kv_overrides(model, observed_ranges(calls), num_layers)
    overrides["rope_cos"] = overrides["rope_sin"] = [{"rmin": np.float32(-1.0), "rmax": np.float32(1.0)}]
    overrides["attention_bias"] = [{"rmin": np.float32(config.mask_value), "rmax": np.float32(0.0)}]
    if config.per_channel:
        inits = {t.name for t in model.graph.initializer if len(t.dims) == 2}
        types = {16: QuantType.QInt16, 8: QuantType.QInt8, 4: QuantType.QInt4}
        for node in model.graph.node:
            if node.op_type == "MatMul" and node.input[1] in inits:
                overrides[node.input[1]] = [{"axis": 1, "quant_type": types[weight_bits(node.name, config)],
                                             "symmetric": True}]
    if fixed:
        overrides.update(fixed_encoding_overrides(fixed))
        overrides.update(tied_kv_fixed_overrides(model, fixed, num_layers))
    return overrides


def quantize_graph_qdq(model: onnx.ModelProto, calls: list[tuple[dict, dict]], overrides: dict[str, list[dict]],
                       float_nodes: list[str], config: QdqConfig) -> onnx.ModelProto:
    """onnxruntime's static QDQ pass for the QNN EP over the fused float graph; `float_nodes` stay float."""
    from onnxruntime.quantization import QuantType, quantize
    from onnxruntime.quantization.execution_providers.qnn import get_qnn_qdq_config

    activation = QuantType.QUInt16 if config.activation_bits == 16 else QuantType.QUInt8
    weight = QuantType.QUInt8 if config.weight_bits == 8 else QuantType.QUInt4
    qconfig = get_qnn_qdq_config(model, _Reader([feeds for feeds, _ in calls]), activation_type=activation,
                                 weight_type=weight, init_overrides=overrides, nodes_to_exclude=float_nodes or None)
    quiet = logging.getLogger().level
    logging.getLogger().setLevel(logging.WARNING)  # the quantizer logs every node at INFO
    with tempfile.TemporaryDirectory(prefix="mtpedge-qdq-") as work:
        fused_file, out = Path(work) / "fused.onnx", Path(work) / "qdq.onnx"
        # a path, not the ModelProto: given a proto, the quantizer's calibration misses tensors
        onnx.save_model(model, fused_file, save_as_external_data=True, location="fused.data")
        try:
            quantize(str(fused_file), str(out), qconfig)
        finally:
            logging.getLogger().setLevel(quiet)
        return onnx.load(str(out))


def gptq_targets(model: onnx.ModelProto, config: QdqConfig, float_nodes: list[str]) -> dict[str, int]:
    """MatMul name -> bits for the weights GPTQ rounds: the quantized ones below 16 bits."""
    inits = {t.name for t in model.graph.initializer}
    return {n.name: weight_bits(n.name, config) for n in model.graph.node
            if n.op_type == "MatMul" and n.input[1] in inits and n.name not in float_nodes
            and weight_bits(n.name, config) < 16}


def calibration_stream(src: Path, config: QdqConfig, say: Callable[[str], None]) -> list[int]:
    """Token ids to calibrate on: the float model's own greedy answers to the project's prompts, or the texts."""
    if config.calibration == "texts":
        tokenizer = Engine.load(src).tokenizer
        return [t for text in CALIBRATION_TEXTS for t in tokenizer.encode(text)]
    from mtpedge.models.distill_prompts import prompt_set

    started = time.perf_counter()
    engine, stream = Engine.load(src), []
    for prompt in prompt_set(CALIBRATION_PROMPTS):
        ids = engine.tokenizer.encode_chat([{"role": "user", "content": prompt}])[:engine.context // 2]
        answer = generate(engine, ids, min(CALIBRATION_ANSWER_TOKENS, engine.context - len(ids) - 1),
                          on_overflow="stop").token_ids  # greedy; stops at the model's end of turn
        stream += [int(t) for t in ids + answer]
    say(f"calibration data: the float model's answers to {CALIBRATION_PROMPTS} prompts, {len(stream)} tokens "
        f"({time.perf_counter() - started:.1f} s)")
    return stream


@dataclass
class _WidestRecipe:
    """What is decided on the widest graph and applied to every width (node names are the same in each)."""

    float_nodes: list[str] = field(default_factory=list)  # nodes kept in float16
    smoothing: dict = field(default_factory=dict)  # smoothing factors by norm name
    rounded: dict = field(default_factory=dict)  # GPTQ's 8-bit weights by MatMul name


def _decide_on_widest(model: onnx.ModelProto, calls: list, config: QdqConfig) -> _WidestRecipe:
    """Float nodes, smoothing (applied to `model`) and GPTQ weights, from the widest graph's recorded calls."""
    feeds = [f for f, _ in calls]
    stats = activation_statistics(model, feeds[:4]) if config.outlier_ratio > 0 else None
    float_nodes = float16_nodes(model, stats, config.float16_stream, config.outlier_ratio, config.float_attention)
    # smoothing leaves the float function unchanged, so the recorded calls stay valid
    smoothing = smoothing_factors(model, feeds, float_nodes, config.smooth_alpha) if config.smooth_alpha else {}
    apply_smoothing(model, smoothing)
    rounded = gptq_weights(model, feeds, gptq_targets(model, config, float_nodes)) if config.gptq else {}
    return _WidestRecipe(float_nodes, smoothing, rounded)


def _quantize_graph(src: Path, entry: GraphEntry, recorder: RecordingEngine, stream: list[int],
                    recipe: _WidestRecipe, fixed: dict[str, dict] | None, num_layers: int,
                    config: QdqConfig) -> tuple[onnx.ModelProto, list, _WidestRecipe]:
    """One graph of the bundle in QDQ form, its recorded calls and the recipe (decided here on the widest graph)."""
    # the other widths take the widest graph's encodings: a couple of calls only feed the quantizer
    calls = recorder.run_stream(stream, entry.width, config.samples_per_graph if fixed is None else 2)
    model = fused_float_graph(src / entry.file)
    drop_present_outputs(model)
    if fixed is None:
        recipe = _decide_on_widest(model, calls, config)
    else:
        apply_smoothing(model, recipe.smoothing)
    overrides = recipe_overrides(model, calls, num_layers, config, fixed)
    overrides.update(apply_rounded(model, recipe.rounded))
    return quantize_graph_qdq(model, calls, overrides, recipe.float_nodes, config), calls, recipe


def qdq_bundle(src: str | Path, out_dir: str | Path, config: QdqConfig | None = None,
               progress: Callable[[str], None] | None = None, quality: bool = True,
               calibration: list[int] | None = None) -> Path:
    """Write a QDQ copy of the float bundle `src` into `out_dir` (atomically), encodings in the manifest.

    `calibration`: the token ids to calibrate on, when the caller has them already (calibration_stream's
    output for this bundle and config: a benchmark building several configs makes them once).
    """
    config = config or QdqConfig()
    say = progress or log.info
    src, out_dir = Path(src), Path(out_dir)
    manifest = float_source(src, "QDQ")
    if not single_decode_graph(manifest):
        say("note: this bundle has several decode graphs; on the HTP a drafted block's rows differ from plain "
            "decoding's at another width, so it will decode plainly by default (export with one --decode-widths, "
            "the default for --precision qdq, to draft losslessly there)")
    started = time.perf_counter()
    recorder = RecordingEngine(src, config.mask_value)
    with staged_folder(out_dir, "qdq") as tmp:
        copy_host_files(src, manifest, tmp)
        shared = SharedWeights(tmp / "weights.data")
        entries, encodings = {}, {}
        widest_first = sorted(manifest.graphs, key=lambda g: -g.width)
        stream = calibration if calibration is not None else calibration_stream(src, config, say)
        fixed: dict[str, dict] | None = None  # the widest graph's activation encodings, for every other width
        recipe = _WidestRecipe()
        try:
            for i, entry in enumerate(widest_first, 1):
                step = time.perf_counter()
                model, calls, recipe = _quantize_graph(src, entry, recorder, stream, recipe, fixed,
                                                       manifest.config.num_layers, config)
                if fixed is None:
                    fixed = activation_encodings(model)
                encodings[entry.name] = io_encodings(model)
                shared.externalize(model)
                onnx.save_model(model, tmp / entry.file)
                entries[entry.name] = replace(entry, precision=config.label, outputs={
                    name: dims for name, dims in entry.outputs.items() if not name.startswith("present_")})
                how = f"calibrated on {len(calls)} calls" if i == 1 else f"the encodings of {widest_first[0].name}"
                say(f"[{i}/{len(manifest.graphs)}] QDQ {entry.name}: {how} ({time.perf_counter() - step:.1f} s)")
                del model
        finally:
            shared.close()
        info = {"config": config_dict(config), "encodings": {g.name: encodings[g.name] for g in manifest.graphs},
                "tied_kv": True, "encodings_from": widest_first[0].name,
                "float16_nodes": recipe.float_nodes, "gptq_weights": len(recipe.rounded),
                "smoothed_norms": len(recipe.smoothing),
                "calibration_tokens": len(stream)}
        entries = [entries[g.name] for g in manifest.graphs]
        new = replace(manifest, graphs=entries, mask_value=config.mask_value,
                      extras={**manifest.extras, "qdq": info})
        write_manifest_with_quality(tmp, src, new, quality, say)
    say(f"QDQ bundle written to {out_dir} ({time.perf_counter() - started:.1f} s)")
    return out_dir

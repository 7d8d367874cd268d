"""A DMTD bundle: the base model's bundle with its graphs tapped at the DMTD model's first trained layer, plus the
trained copy's graphs (models/dmtd.py).

    <graph>.onnx             the base model's graphs, with one more output `layer_hidden`: the residual stream
                             entering layer T = L - D - m (what the frozen prefix hands the trained layers)
    dmtd/think_ar{N}.onnx    the m trained thinking layers, headless (contract.py): tapped states in, their output
                             residual stream out (absent when m = 0)
    dmtd/decode_ar{N}.onnx   the D trained decoding layers + norm + the base's LM head (the lossy `dmtd`)
    dmtd/draft_ar{N}.onnx    the same layers with the LM head's rows for a shortlist of tokens (`dmtd-spec`: a draft
                             only has to be right, and the shortlist cuts the largest matrix of a draft call)
    dmtd/shortlist.npy       the shortlist's token ids (the training answers' most frequent tokens), int64
    dmtd/weights.data        the copy's weights, each tensor once

The LoRA updates are folded into the copied layers' weights. Every method runs on the base graphs as on any
bundle; the `dmtd-spec` and `dmtd` drafters (runtime/drafters/dmtd.py) add the copy's graphs. Built in a hidden
folder and moved into place when whole.

With a QuantConfig (the fast recipe: what `--drafter dmtd-spec` exports for the default model) the base graphs are
quantized as any bundle's (a GGUF source's own grid), and the copy's graphs take round-to-nearest blocks
(COPY_PRECISION) on the same kernels: the trained weights are on no grid, and a draft only has to be right.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import torch

from mtpedge.runtime.bundle import GraphEntry, read_manifest, write_manifest
from mtpedge.runtime.contract import GraphShape, graph_name

from ..models.checkpoint import shipped_or_path
from ..models.dmtd import DecodingGraph, ThinkingGraph
from ..models.dmtd_train import load_dmtd
from ..models.loading import LoadedModel
from .bundle_writer import ExportConfig, export_bundle
from .fused_ops import fuse_decoder_ops
from .native_matmul import TILE
from .onnx_graphs import SharedWeights, check_contract, trace_graph
from .quant_config import QuantConfig, copy_quantization
from .quantize_bundle import WeightSource, quantize_graph
from .shipped import DEFAULT_DMTD
from .staging import replace_folder

log = logging.getLogger(__name__)

COPY_FOLDER = "dmtd"
SHORTLIST_FILE = f"{COPY_FOLDER}/shortlist.npy"


@dataclass(frozen=True)
class DmtdExportConfig:
    context: int = 1024
    context_buckets: tuple[int, ...] = ()  # the base graphs' smaller contexts (ExportConfig.context_buckets)
    prefill_width: int = 64
    decode_widths: tuple[int, ...] = (1, 4)  # the base model's graphs: dmtd-spec's chains of 3, dmtd's cycles
    copy_widths: tuple[int, ...] = (1, 4)  # the copy's graphs besides the prefill width: drafts (1), heads
    shortlist: int = 8192  # tokens the draft graphs score (0: the whole vocabulary)
    quantization: QuantConfig | None = None  # None: float32 graphs (see the module's docstring)
    check_parity: bool = True

    def __post_init__(self) -> None:
        if self.shortlist < 0:
            raise ValueError(f"the drafting shortlist must be >= 0 tokens (0 = all), got {self.shortlist}")
        if self.quantization is not None and self.quantization.kernels == "mtpedge" and self.shortlist % TILE:
            raise ValueError(f"mtpedge's kernels compute {TILE} output columns at a time: make the drafting "
                             f"shortlist a multiple of {TILE} (got {self.shortlist})")


def resolve_dmtd(name: str) -> Path:
    """`default` names the shipped DMTD model; anything else is a checkpoint path."""
    return shipped_or_path(name, DEFAULT_DMTD, "DMTD model",
                           "train one with `mtpedge train-dmtd` and export it with --export-bundle")


def export_dmtd_bundle(loaded: LoadedModel, checkpoint: Path, out_dir: Path, config: DmtdExportConfig | None = None,
                       progress: Callable[[str], None] | None = None) -> Path:
    config = config or DmtdExportConfig()
    say = progress or log.info
    started = time.perf_counter()
    checkpoint = resolve_dmtd(str(checkpoint))
    model, state = load_dmtd(checkpoint, loaded)
    model.eval()
    out_dir = Path(out_dir)
    tmp = out_dir.parent / f".{out_dir.name}.dmtd-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        export_bundle(loaded, tmp, ExportConfig(context=config.context, context_buckets=config.context_buckets,
                                                prefill_width=config.prefill_width,
                                                decode_widths=config.decode_widths, tap_layer=model.tap,
                                                quantization=config.quantization,
                                                check_parity=config.check_parity), progress=say)
        (tmp / COPY_FOLDER).mkdir()
        shortlist = _shortlist(state, loaded.config.vocab_size, config.shortlist)
        np.save(tmp / SHORTLIST_FILE, shortlist)
        graphs = _write_copy_graphs(model, loaded, shortlist, config, tmp, say)
        manifest = read_manifest(tmp)
        extras = dict(manifest.extras)
        extras["dmtd"] = {
            **model.config.to_dict(),
            "tap_layer": model.tap,
            "trained_taus": list(state["settings"]["taus"]),
            "train_steps": int(state["step"]),
            "train_tokens": int(state.get("data_tokens", 0)),
            "checkpoint_sha256": hashlib.sha256(checkpoint.read_bytes()).hexdigest(),
            "shortlist_file": SHORTLIST_FILE,
            **{f"{kind}_graphs": entries for kind, entries in graphs.items()},
        }
        write_manifest(tmp, dataclasses.replace(manifest, extras=extras))
        replace_folder(tmp, out_dir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    say(f"DMTD bundle written to {out_dir} ({time.perf_counter() - started:.0f} s)")
    return out_dir


def _shortlist(state: dict, vocab_size: int, size: int) -> np.ndarray:
    """The `size` most frequent answer tokens of the training data, by id (all tokens if size is 0 or more)."""
    frequent = np.asarray(state["frequent_tokens"], dtype=np.int64)
    if size == 0 or size >= vocab_size:
        return np.arange(vocab_size, dtype=np.int64)
    if size > frequent.size:
        raise ValueError(f"the checkpoint ranks {frequent.size} tokens, fewer than the shortlist of {size}: "
                         f"pass a smaller shortlist, or 0 for the whole vocabulary")
    return np.sort(frequent[:size])


def _write_copy_graphs(model, loaded: LoadedModel, shortlist: np.ndarray, config: DmtdExportConfig, folder: Path,
                       say: Callable[[str], None]) -> dict[str, list[dict]]:
    """The copy's graph sets (think, decode, draft) at every copy width, in folder/dmtd; their manifest entries.

    Quantized ones are traced into a float32 work folder first, which quantize_graph reads and which is removed."""
    think, decode = model.merged_layers()
    lm_weight = loaded.decoder.lm_head.weight.detach()
    modules = {"decode": (DecodingGraph(decode, model.norm, lm_weight), lm_weight.shape[0]),
               "draft": (DecodingGraph(decode, model.norm, lm_weight[torch.from_numpy(shortlist)]), shortlist.size)}
    if think:
        modules["think"] = (ThinkingGraph(think), 0)
    widths = sorted({config.prefill_width, *config.copy_widths})
    quant = config.quantization
    work = folder / (COPY_FOLDER if quant is None else f".{COPY_FOLDER}-float32")
    work.mkdir(exist_ok=True)
    weights = SharedWeights(work / "weights.data")
    entries: dict[str, list[GraphEntry]] = {}
    try:
        for kind, (module, vocab) in modules.items():
            entries[kind] = [_write_graph(module.eval(), kind, width, vocab, loaded, config, work, weights)
                             for width in widths]
            say(f"wrote {len(widths)} {kind} graphs (widths {widths})")
    finally:
        weights.close()
    if quant is not None:
        entries = _quantize_copy(entries, quant, work, folder / COPY_FOLDER, say)
        shutil.rmtree(work)
    return {kind: [dataclasses.asdict(e) for e in kind_entries] for kind, kind_entries in entries.items()}


def _quantize_copy(entries: dict[str, list[GraphEntry]], quant: QuantConfig, work: Path, out: Path,
                   say: Callable[[str], None]) -> dict[str, list[GraphEntry]]:
    """The float32 copy graphs in `work` on round-to-nearest blocks (COPY_PRECISION) with the recipe's kernels and
    operators, into `out`."""
    copy_config = copy_quantization(quant)
    source = WeightSource(copy_config, None)
    shared = SharedWeights(out / "weights.data")
    quantized: dict[str, list[GraphEntry]] = {}
    try:
        for kind, kind_entries in entries.items():
            quantized[kind] = []
            for entry in kind_entries:
                graph, _ = quantize_graph(work / Path(entry.file).name, source, shared)
                onnx.save_model(graph, out / Path(entry.file).name)
                quantized[kind].append(dataclasses.replace(entry, precision=copy_config.label))
            say(f"quantized the {kind} graphs ({copy_config.label})")
    finally:
        shared.close()
    return quantized


def _write_graph(module: torch.nn.Module, kind: str, width: int, vocab: int, loaded: LoadedModel,
                 config: DmtdExportConfig, folder: Path, weights: SharedWeights) -> GraphEntry:
    cfg = loaded.config
    layers = len(module.layers)
    headless = kind == "think"
    shape = GraphShape(width, config.context, cfg.hidden_size, cfg.head_dim, cfg.num_kv_heads, layers,
                       vocab or cfg.vocab_size, tap_layer=layers if headless else 0, head=not headless)
    with torch.no_grad():
        graph = trace_graph(module, shape)
    check_contract(graph, shape)
    if config.quantization is not None and config.quantization.fused_ops:
        fuse_decoder_ops(graph)
    weights.externalize(graph)
    name = graph_name(kind, width, config.context)
    onnx.save_model(graph, folder / f"{name}.onnx")
    return GraphEntry(name, f"{COPY_FOLDER}/{name}.onnx", "prefill" if width == config.prefill_width else "decode",
                      width, config.context, "float32", shape.input_shapes(), shape.output_shapes())

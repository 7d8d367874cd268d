"""`mtpedge export`: model weights -> a self-describing bundle folder, written atomically.

Everything is written into a hidden temporary folder beside the target and renamed into place only when
complete and checked, so an interrupted export leaves no half bundle that looks whole.
"""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
import torch

from mtpedge import __version__
from mtpedge.runtime.bundle import GraphEntry, Manifest, TokenizerInfo, write_manifest
from mtpedge.runtime.contract import DEFAULT_MASK_VALUE, FUSED_OPS, LAYER_HIDDEN, graph_name

from ..models.loading import LoadedModel, load_model
from .fused_ops import fuse_decoder_ops
from .onnx_graphs import SharedWeights, check_contract, trace_graph
from .parity import graph_parity
from .precision import Precision
from .staging import replace_folder, staging_folder
from .tree_templates import tree_template_extras

log = logging.getLogger(__name__)

WEIGHTS_FILE = "weights.data"


@dataclass(frozen=True)
class ExportConfig:
    context: int = 1024
    # smaller contexts whose graphs are exported too (same widths, same weights file): the runtime runs the
    # smallest that holds the cache, so a short conversation does not read a long cache (runtime/kv_cache.py)
    context_buckets: tuple[int, ...] = ()
    prefill_width: int = 64
    decode_widths: tuple[int, ...] = (1, 16)
    mask_value: float = DEFAULT_MASK_VALUE
    check_parity: bool = True  # run each graph once against the PyTorch reference
    tree_templates: bool = True  # write the static ESP tree layouts of each decode width (extras)
    quantization: Precision = None  # None: float32 graphs; else made from them (export/precision.py)
    target_soc: str | None = None  # with a QdqConfig: compile QNN context binaries for this SoC
    mtp_adapter: str | None = None  # a `mtpedge train-mtp` checkpoint: adapter graphs + files (export/mtp_export)
    # learned mask embeddings for the esp/hybrid drafters (export/learned_masks): "auto" = the masks shipped
    # for the embedded default model when the weights are exactly those (SHA-256) and the graphs are float32 or
    # MatMulNBits (not QDQ: its calibration saw no mask slots); a path = that masks file (.npz); "none" = none
    learned_masks: str = "auto"
    tap_layer: int = 0  # > 0: graphs also output the residual stream entering this layer (DMTD, contract)
    extras: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        widths = (self.prefill_width, *self.decode_widths)
        if any(w < 1 for w in widths):
            raise ValueError(f"graph widths must be >= 1, got {widths}")
        if max(widths) > self.context:
            raise ValueError(f"a graph width ({max(widths)}) cannot exceed the context ({self.context})")
        if any(not max(widths) <= b < self.context for b in self.context_buckets):
            raise ValueError(f"context buckets must lie between the widest graph ({max(widths)}) and the context "
                             f"({self.context}), got {self.context_buckets}")
        if len(set(self.decode_widths)) != len(self.decode_widths):
            raise ValueError(f"decode widths repeat: {self.decode_widths}")
        if self.mtp_adapter and not _float_or_nbits(self):
            raise ValueError("a bundle with an MTP adapter is float32 or MatMulNBits (gguf/int8/int4) only (the QDQ "
                             "converter does not handle the lora_gate input yet): export it with another "
                             "--precision and no --target")
        if self.tap_layer and self.mtp_adapter:
            raise ValueError("a DMTD bundle (tapped graphs) cannot also carry an MTP adapter: export them apart")
        if self.learned_masks not in ("auto", "none"):
            if self.mtp_adapter:
                raise ValueError("--masks and --mtp-adapter both give learned masks: pass one of them")
            if not _float_or_nbits(self):
                raise ValueError("learned masks are attached to float32 and MatMulNBits (gguf/int8/int4) bundles "
                                 "only, not QDQ ones (their calibration saw no mask slots): export with another "
                                 "--precision and no --target")


def _producer_versions() -> dict[str, str]:
    import onnxruntime
    import transformers

    return {"mtpedge": __version__, "torch": torch.__version__, "transformers": transformers.__version__,
            "onnx": onnx.__version__, "onnxruntime": onnxruntime.__version__}


def tokenizer_info(tokenizer, stop_token_ids: list[int]) -> TokenizerInfo:
    with_special = tokenizer("a")["input_ids"]
    without = tokenizer("a", add_special_tokens=False)["input_ids"]
    bos = tokenizer.bos_token_id
    return TokenizerInfo(
        file="tokenizer.json",
        bos_token_id=bos,
        eos_token_ids=sorted(set(stop_token_ids)),
        chat_template=tokenizer.chat_template if isinstance(tokenizer.chat_template, str) else None,
        # some tokenizers add BOS in code rather than in tokenizer.json's post-processor: record it
        add_bos_token=bos is not None and with_special[:1] == [bos] and without[:1] != [bos],
        bos_token=tokenizer.bos_token,
        eos_token=tokenizer.eos_token,
    )


def export_bundle(
    model: str | Path | LoadedModel | None,
    out_dir: str | Path,
    config: ExportConfig | None = None,
    progress: Callable[[str], None] | None = None,
) -> Path:
    """Export `model` (path, loaded model, or None for the default) into the bundle folder `out_dir`."""
    config = config or ExportConfig()
    say = progress or log.info
    out_dir = Path(out_dir)
    started = time.perf_counter()
    tmp = staging_folder(out_dir, "partial")  # first: a folder that cannot be written fails before the load
    try:
        loaded = model if isinstance(model, LoadedModel) else load_model(model)
        cfg = loaded.config
        masks = _learned_masks(config, loaded)  # before any work: a wrong masks file fails fast
        say(f"loaded {loaded.name}: {cfg.architecture}, {cfg.num_layers} layers, hidden {cfg.hidden_size}, "
            f"vocab {cfg.vocab_size} ({time.perf_counter() - started:.1f} s)")
        manifest = _write_contents(loaded, tmp, config, say, masks)
        write_manifest(tmp, manifest)  # with every file's size and SHA-256
        if config.quantization is None and config.target_soc is None:
            replace_folder(tmp, out_dir)
        else:  # the float bundle is the quantizer's input and the quality report's reference
            from .precision import finish_bundle

            gguf = loaded.source if loaded.source.suffix == ".gguf" else None
            finish_bundle(tmp, out_dir, config.quantization, config.target_soc, gguf, progress=say)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    say(f"bundle written to {out_dir} ({time.perf_counter() - started:.1f} s)")
    return out_dir


def _float_or_nbits(config: ExportConfig) -> bool:
    """Whether the graphs stay float32 or become MatMulNBits (not QDQ / QNN). What learned masks and an MTP adapter
    need: masks are host-side embeddings that any graph takes, but a QDQ graph was calibrated without them, and the
    QDQ converter does not handle the adapter's lora_gate input."""
    from .quant_config import QuantConfig

    return config.target_soc is None and (config.quantization is None or isinstance(config.quantization, QuantConfig))


def _fuses_ops(config: ExportConfig) -> bool:
    """MatMulNBits bundles whose QuantConfig asks for it are traced onto onnxruntime's fused CPU ops
    (export/fused_ops.py) before quantization.

    A float32 bundle keeps standard operators: it is the QDQ converter's input, and fused ops bought it ~1% of a
    width-1 call (benchmarks/results/fast/README.md, section 9)."""
    from .quant_config import QuantConfig

    quant = config.quantization
    return config.target_soc is None and isinstance(quant, QuantConfig) and quant.fused_ops


def _learned_masks(config: ExportConfig, loaded: LoadedModel):
    """The (LearnedMasks, origin) to attach, or None (see ExportConfig.learned_masks)."""
    from .learned_masks import checked_masks, default_masks_path, load_masks_file

    choice = config.learned_masks
    if choice == "none" or config.mtp_adapter:
        return None
    if choice == "auto":
        shipped = default_masks_path()
        if shipped is None or not _float_or_nbits(config):
            return None
        learned = load_masks_file(shipped)
        if learned.source_sha256 != loaded.source_sha256:
            return None  # other weights than the ones the shipped masks were trained on: nothing to attach
        return learned, f"shipped:{shipped.name}"
    return checked_masks(load_masks_file(choice), loaded.source_sha256, loaded.config.hidden_size, choice), \
        str(Path(choice).name)


def _write_contents(loaded: LoadedModel, folder: Path, config: ExportConfig, say, masks=None) -> Manifest:
    cfg = loaded.config
    loaded.tokenizer.backend_tokenizer.save(str(folder / "tokenizer.json"))
    static_extras = _copy_static_table(loaded, folder, say)
    embeddings = loaded.decoder.model.embed_tokens.weight.detach().numpy().astype(np.float32)
    np.save(folder / "embeddings.npy", embeddings)
    graph_module, mtp_extras = _graph_module(loaded, folder, config, say, masks)
    adapter = bool(mtp_extras.get("mtp", {}).get("adapter_graphs"))
    entries, fused = _write_graphs(graph_module, cfg, folder, config, adapter, say)
    parity = {}
    if config.check_parity:
        for entry in entries:
            parity[entry.name] = graph_parity(loaded.decoder, folder / entry.file, _shape(cfg, entry.width,
                                                                                          entry.context, adapter,
                                                                                          config.tap_layer))
            p = parity[entry.name]
            say(f"parity {entry.name} vs PyTorch: max |diff| {p['max_abs']:.2e} (relative {p['max_rel']:.1e}), "
                f"argmax agreement {p['argmax_agree']:.0%}")
    return Manifest(
        model_name=loaded.name,
        config=cfg,
        context=config.context,
        tokenizer=tokenizer_info(loaded.tokenizer, loaded.stop_token_ids),
        embeddings_file="embeddings.npy",
        graphs=entries,
        mask_value=config.mask_value,
        source_sha256=loaded.source_sha256,
        producer=_producer_versions(),
        extras={"export_parity": parity, "weights_file": WEIGHTS_FILE, **({FUSED_OPS: fused} if fused else {}),
                **static_extras,
                **(tree_template_extras(config.decode_widths) if config.tree_templates else {}), **mtp_extras,
                **config.extras},
    )


def _copy_static_table(loaded: LoadedModel, folder: Path, say) -> dict:
    """The static n-gram table shipped for this tokenizer (runtime/static_ngrams.py), copied into the bundle so that
    `lookup` on any device (the Android engine too) finds it there; {} where none ships."""
    from ..runtime.static_ngrams import BUNDLE_FILE, EXTRAS_KEY, shipped_file, vocab_fingerprint

    shipped = shipped_file(vocab_fingerprint(loaded.tokenizer.backend_tokenizer.get_vocab(with_added_tokens=True)))
    if shipped is None:
        return {}
    shutil.copyfile(shipped, folder / BUNDLE_FILE)
    say(f"static n-gram table for lookup attached ({shipped.name})")
    return {EXTRAS_KEY: BUNDLE_FILE}


def _graph_module(loaded: LoadedModel, folder: Path, config: ExportConfig, say, masks) -> tuple:
    """The module the graphs are traced from (the base, its MTP adapter or a tapped decoder) and its manifest
    extras; an adapter's or learned masks' files are written into the folder."""
    graph_module, mtp_extras = loaded.decoder, {}
    if config.mtp_adapter:
        from .mtp_export import MtpExport

        mtp = MtpExport.load(config.mtp_adapter, loaded)
        graph_module = mtp.graph_module(loaded.decoder)
        mtp_extras = {"mtp": mtp.write_files(folder)}
    elif masks is not None:
        from .learned_masks import write_masks_into_bundle

        mtp_extras = {"mtp": write_masks_into_bundle(folder, *masks)}
        say(f"learned masks attached (k={masks[0].masks.shape[0]}, from {masks[1]})")
    if config.tap_layer:
        from ..models.decoder import TappedDecoder

        graph_module = TappedDecoder(loaded.decoder, config.tap_layer)
        mtp_extras[LAYER_HIDDEN] = config.tap_layer
    return graph_module, mtp_extras


def _write_graphs(graph_module, cfg, folder: Path, config: ExportConfig, adapter: bool, say) -> tuple[list, dict]:
    """Trace, check and save every graph (each bucket's prefill and decode widths) over one shared weights file."""
    specs = [(kind, width, context) for context in (config.context, *sorted(config.context_buckets, reverse=True))
             for kind, width in [("prefill", config.prefill_width)] + [("decode", w) for w in config.decode_widths]]
    weights = SharedWeights(folder / WEIGHTS_FILE)
    entries, fused = [], {}
    try:
        for i, (kind, width, context) in enumerate(specs, 1):
            name = graph_name(kind, width, context)
            step_started = time.perf_counter()
            say(f"[{i}/{len(specs)}] tracing {name}")
            shape = _shape(cfg, width, context, adapter, config.tap_layer)
            graph = trace_graph(graph_module, shape)
            check_contract(graph, shape)
            if _fuses_ops(config):
                fused = fuse_decoder_ops(graph)
            weights.externalize(graph)
            onnx.save_model(graph, folder / f"{name}.onnx")
            del graph
            entries.append(GraphEntry(name, f"{name}.onnx", kind, width, context, "float32",
                                      shape.input_shapes(), shape.output_shapes()))
            say(f"[{i}/{len(specs)}] wrote {name} ({time.perf_counter() - step_started:.1f} s)")
    finally:
        weights.close()
    return entries, fused


def _shape(cfg, width: int, context: int, adapter: bool = False, tap_layer: int = 0):
    from mtpedge.runtime.contract import GraphShape

    return GraphShape(width, context, cfg.hidden_size, cfg.head_dim, cfg.num_kv_heads, cfg.num_layers,
                      cfg.vocab_size, adapter, tap_layer)

"""A DMTD bundle: an ordinary bundle of the base model plus DMTD's part graphs in `dmtd/`.

    dmtd/thinking_ar{N}.onnx        base layers [0, L-D)                       -> hidden
    dmtd/base_decoding_ar{N}.onnx   base layers [L-D, L) + norm + LM head       (thinking + this = the base model)
    dmtd/dmtd_decoding_ar{N}.onnx   the trained copy of the last D layers + its norm + the same LM head

The base graphs keep every other method (plain decoding, esp, lookup) working on the same bundle, which is
what makes "same bundle" comparisons possible. Built in a hidden folder and moved into place when whole.
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

import onnx
import torch

from mtpedge.runtime.bundle import read_manifest, write_manifest
from mtpedge.runtime.contract import GraphShape

from ..models.dmtd_train import load_head
from ..models.loading import LoadedModel
from .bundle_writer import ExportConfig, export_bundle
from .dmtd_parts import DecodingPart, PartShape, ThinkingPart, trace_part
from .onnx_graphs import SharedWeights
from .staging import replace_folder

log = logging.getLogger(__name__)

PARTS_FOLDER = "dmtd"
ROLES = ("thinking", "base_decoding", "dmtd_decoding")


@dataclass(frozen=True)
class DmtdExportConfig:
    context: int = 1024
    prefill_width: int = 64
    decode_widths: tuple[int, ...] = (1, 8)  # the base model's full graphs
    part_widths: tuple[int, ...] = (1, 4, 8)  # besides the prefill width: heads (τ), drafts, verification
    check_parity: bool = True


def part_file(role: str, width: int) -> str:
    return f"{PARTS_FOLDER}/{role}_ar{width}.onnx"


def export_dmtd_bundle(loaded: LoadedModel, checkpoint: Path, out_dir: Path, config: DmtdExportConfig | None = None,
                       progress: Callable[[str], None] | None = None) -> Path:
    config = config or DmtdExportConfig()
    say = progress or log.info
    started = time.perf_counter()
    head, state = load_head(checkpoint, loaded)
    head.eval()
    cfg = loaded.config
    split = head.split
    out_dir = Path(out_dir)
    tmp = out_dir.parent / f".{out_dir.name}.dmtd-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        export_bundle(loaded, tmp, ExportConfig(context=config.context, prefill_width=config.prefill_width,
                                                decode_widths=config.decode_widths,
                                                check_parity=config.check_parity), progress=say)
        (tmp / PARTS_FOLDER).mkdir()
        decoder = loaded.decoder.eval()
        modules = {
            "thinking": ThinkingPart(decoder, split.thinking_layers),
            "base_decoding": DecodingPart(decoder.model.layers[split.thinking_layers:], decoder.model.norm,
                                          decoder.lm_head),
            "dmtd_decoding": DecodingPart(head.layers, head.norm, decoder.lm_head),
        }
        layers = {"thinking": split.thinking_layers, "base_decoding": split.decoding_layers,
                  "dmtd_decoding": split.decoding_layers}
        widths = sorted({config.prefill_width, *config.part_widths})
        parts = []
        weights = SharedWeights(tmp / PARTS_FOLDER / "dmtd_weights.data")
        try:
            for role in ROLES:
                for width in widths:
                    shape = PartShape(role, GraphShape(width, config.context, cfg.hidden_size, cfg.head_dim,
                                                       cfg.num_kv_heads, layers[role], cfg.vocab_size))
                    with torch.no_grad():
                        graph = trace_part(modules[role], shape)
                    weights.externalize(graph)
                    onnx.save_model(graph, tmp / part_file(role, width))
                    parts.append({"role": role, "width": width, "file": part_file(role, width),
                                  "layers": layers[role], "inputs": shape.input_shapes(),
                                  "outputs": shape.output_shapes()})
                    say(f"wrote {part_file(role, width)}")
        finally:
            weights.close()
        manifest = read_manifest(tmp)
        extras = dict(manifest.extras)
        extras["dmtd"] = {
            "decoding_layers": split.decoding_layers,
            "thinking_layers": split.thinking_layers,
            "trained_taus": list(state["settings"]["taus"]),
            "train_steps": int(state["step"]),
            "checkpoint_sha256": hashlib.sha256(checkpoint.read_bytes()).hexdigest(),
            "parts": parts,
        }
        write_manifest(tmp, dataclasses.replace(manifest, extras=extras))
        replace_folder(tmp, out_dir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    say(f"DMTD bundle written to {out_dir} ({time.perf_counter() - started:.0f} s)")
    return out_dir

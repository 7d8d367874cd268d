"""A DMTD bundle: the base model's bundle with its thinking layers' output tapped, plus the trained decoding copy.

    <graph>.onnx             the base model's graphs, with one more output `layer_hidden`: the residual stream
                             entering layer L - D (what the thinking layers hand the decoding layers; contract.py)
    dmtd/copy_ar{N}.onnx     the trained copy of the last D layers + its norm + the base's LM head, as a D-layer
                             decoder graph of the ordinary contract (input: a token's embedding, + the thinking
                             hidden state at a head); its weights in dmtd/weights.data

Every method (plain decoding, esp, lookup, hybrid) runs on the base graphs as on any bundle, which is what makes
"same bundle" comparisons possible; the `dmtd-spec` and `dmtd` drafters (runtime/drafters/dmtd.py) add the copy.
Built in a hidden folder and moved into place when whole.
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

from mtpedge.runtime.bundle import GraphEntry, read_manifest, write_manifest
from mtpedge.runtime.contract import GraphShape, graph_name

from ..models.dmtd import CopyGraph
from ..models.dmtd_train import load_head
from ..models.loading import LoadedModel
from .bundle_writer import ExportConfig, export_bundle
from .onnx_graphs import SharedWeights, check_contract, trace_graph
from .staging import replace_folder

log = logging.getLogger(__name__)

COPY_FOLDER = "dmtd"


@dataclass(frozen=True)
class DmtdExportConfig:
    context: int = 1024
    prefill_width: int = 64
    decode_widths: tuple[int, ...] = (1, 8)  # the base model's graphs: verification chains of dmtd-spec, heads of dmtd
    copy_widths: tuple[int, ...] = (1, 4, 8)  # besides the prefill width: drafts (1) and refills of heads
    check_parity: bool = True


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
                                                decode_widths=config.decode_widths, tap_layer=split.thinking_layers,
                                                check_parity=config.check_parity), progress=say)
        (tmp / COPY_FOLDER).mkdir()
        copy = CopyGraph(head, loaded.decoder.lm_head).eval()
        entries = []
        weights = SharedWeights(tmp / COPY_FOLDER / "weights.data")
        try:
            for width in sorted({config.prefill_width, *config.copy_widths}):
                shape = GraphShape(width, config.context, cfg.hidden_size, cfg.head_dim, cfg.num_kv_heads,
                                   split.decoding_layers, cfg.vocab_size)
                with torch.no_grad():
                    graph = trace_graph(copy, shape)
                check_contract(graph, shape)
                weights.externalize(graph)
                name = graph_name("copy", width, config.context)
                onnx.save_model(graph, tmp / COPY_FOLDER / f"{name}.onnx")
                entries.append(GraphEntry(name, f"{COPY_FOLDER}/{name}.onnx", "decode", width, config.context,
                                          "float32", shape.input_shapes(), shape.output_shapes()))
                say(f"wrote {entries[-1].file}")
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
            "copy_graphs": [dataclasses.asdict(e) for e in entries],
        }
        write_manifest(tmp, dataclasses.replace(manifest, extras=extras))
        replace_folder(tmp, out_dir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    say(f"DMTD bundle written to {out_dir} ({time.perf_counter() - started:.0f} s)")
    return out_dir

"""A QDQ bundle -> a QNN bundle: each graph compiled by the QNN EP into an EPContext model + context binary.

The context binary is the HTP graph, finalized for one Hexagon architecture and SoC; a phone loads it in a
fraction of the time a QDQ model takes to compile on the device. Compilation runs here, on x86, with the
HTP backend that onnxruntime-qnn ships (the same library that simulates it).

Only `snapdragon-8-elite` (htp_arch 79, soc_model 69) has been compiled and run on the simulator here; the
other entries are the QNN SDK's published ids for those chips and are untested.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import onnx
import onnxruntime as ort

from mtpedge.runtime.bundle import read_manifest, write_manifest
from mtpedge.runtime.qnn import DISABLE_CPU_FALLBACK, qnn_devices, qnn_module

from .staging import copy_host_files, staged_folder

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SocTarget:
    name: str  # marketing name
    chipset: str  # Qualcomm part number, as Qualcomm AI Hub names chipsets
    htp_arch: int  # Hexagon architecture version (v79 ...)
    soc_model: int  # QNN SDK SoC id
    tested_here: bool  # compiled and run on the simulator by this project's tests / measurements


SOCS: dict[str, SocTarget] = {
    "snapdragon-8-elite": SocTarget("Snapdragon 8 Elite", "sm8750", 79, 69, True),
    "snapdragon-8-gen-3": SocTarget("Snapdragon 8 Gen 3", "sm8650", 75, 57, False),
    "snapdragon-8-gen-2": SocTarget("Snapdragon 8 Gen 2", "sm8550", 73, 43, False),
}


def soc_target(name: str) -> SocTarget:
    """A SoC by key (`snapdragon-8-elite`) or chipset (`sm8750`), case-insensitive."""
    key = name.lower().replace(" ", "-")
    for soc_key, soc in SOCS.items():
        if key in (soc_key, soc.chipset):
            return soc
    raise ValueError(f"unknown SoC {name!r}: choose one of {', '.join(SOCS)} (or their chipsets "
                     f"{', '.join(s.chipset for s in SOCS.values())})")


def compile_graph(qdq_file: Path, ctx_file: Path, soc: SocTarget) -> list[str]:
    """Compile one QDQ graph into `ctx_file` (+ its context binary); returns the files written."""
    before = set(os.listdir(ctx_file.parent))
    opts = ort.SessionOptions()
    opts.add_session_config_entry(DISABLE_CPU_FALLBACK, "1")  # the whole graph on the HTP, or an error
    opts.add_session_config_entry("ep.context_enable", "1")
    opts.add_session_config_entry("ep.context_file_path", str(ctx_file))
    opts.add_session_config_entry("ep.context_embed_mode", "0")  # the binary beside the model, not inside it
    opts.add_provider_for_devices(qnn_devices(), {"backend_path": qnn_module().get_qnn_htp_path(),
                                                  "htp_arch": str(soc.htp_arch), "soc_model": str(soc.soc_model)})
    ort.InferenceSession(str(qdq_file), opts)
    written = sorted(set(os.listdir(ctx_file.parent)) - before)
    if ctx_file.name not in written:
        raise RuntimeError(f"the QNN EP wrote no EPContext model for {qdq_file.name} (wrote {written})")
    model = onnx.load(str(ctx_file), load_external_data=False)
    ops = {node.op_type for node in model.graph.node}
    if ops != {"EPContext"}:
        raise RuntimeError(f"{qdq_file.name} did not compile whole for the HTP: its context model still has {ops}")
    return written


def compile_qnn_bundle(src: str | Path, out_dir: str | Path, soc_name: str,
                       progress: Callable[[str], None] | None = None) -> Path:
    """Compile every graph of the QDQ bundle `src` for `soc_name` into a new bundle `out_dir` (atomically)."""
    say = progress or log.info
    soc = soc_target(soc_name)
    src, out_dir = Path(src), Path(out_dir)
    manifest = read_manifest(src)
    if "qdq" not in manifest.extras:
        raise ValueError(f"{src} is not a QDQ bundle: run `mtpedge export --precision qdq` first "
                         "(the HTP runs quantized graphs only)")
    started = time.perf_counter()
    with staged_folder(out_dir, "qnn") as tmp:
        copy_host_files(src, manifest, tmp)
        entries, binaries = [], []
        for i, entry in enumerate(manifest.graphs, 1):
            step = time.perf_counter()
            ctx = tmp / f"{entry.name}_ctx.onnx"
            written = compile_graph(src / entry.file, ctx, soc)
            binaries += [f for f in written if f != ctx.name]
            entries.append(replace(entry, file=ctx.name))
            say(f"[{i}/{len(manifest.graphs)}] compiled {entry.name} for {soc.name} "
                f"({time.perf_counter() - step:.1f} s)")
        target = {"soc": soc.name, "chipset": soc.chipset, "htp_arch": soc.htp_arch, "soc_model": soc.soc_model,
                  "context_binaries": binaries, "onnxruntime": ort.__version__,
                  "onnxruntime_qnn": getattr(qnn_module(), "__version__", None)}
        new = replace(manifest, graphs=entries, extras={**manifest.extras, "qnn": target})
        write_manifest(tmp, new)
    say(f"QNN bundle for {soc.name} written to {out_dir} ({time.perf_counter() - started:.1f} s)")
    return out_dir

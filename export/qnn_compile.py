"""A QDQ bundle -> a QNN bundle: each graph compiled by the QNN EP into an EPContext model + context binary.

The context binary is the HTP graph, finalized for one Hexagon architecture and SoC; a phone loads it in a
fraction of the time a QDQ model takes to compile on the device. Compilation runs here, on x86, with the
HTP backend that onnxruntime-qnn ships (the same library that simulates it).

By default every graph of the bundle (prefill and each decode width) goes into one QNN context whose graphs
share their weights, so the phone holds one copy of them instead of one per width. The x86 simulator can
run the graphs while they are compiled into that context but cannot load the finished binary back
(runtime/qnn.py says what was measured); `share_weights=False` writes one self-contained binary per graph,
the form the simulator runs.

Only `snapdragon-8-elite` (htp_arch 79, soc_model 69) has been compiled and run on the simulator here; the
other entries are the QNN SDK's published ids for those chips and are untested.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import onnx
import onnxruntime as ort

from mtpedge.runtime.bundle import read_manifest, write_manifest
from mtpedge.runtime.qnn import DISABLE_CPU_FALLBACK, SHARE_EP_CONTEXTS, qnn_devices, qnn_module

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


def _compile_options(ctx_file: Path, soc: SocTarget, share: str | None) -> ort.SessionOptions:
    """Session options that make the QNN EP write `ctx_file`; share: None, "group" or "last" (of a shared group)."""
    opts = ort.SessionOptions()
    opts.add_session_config_entry(DISABLE_CPU_FALLBACK, "1")  # the whole graph on the HTP, or an error
    opts.add_session_config_entry("ep.context_enable", "1")
    opts.add_session_config_entry("ep.context_file_path", str(ctx_file))
    opts.add_session_config_entry("ep.context_embed_mode", "0")  # the binary beside the model, not inside it
    if share is not None:  # one QNN context for the group, its weights stored once (x86 generation only)
        opts.add_session_config_entry(SHARE_EP_CONTEXTS, "1")
        if share == "last":  # the group ends here: its one context binary is written now
            opts.add_session_config_entry("ep.stop_share_ep_contexts", "1")
    opts.add_provider_for_devices(qnn_devices(), {"backend_path": qnn_module().get_qnn_htp_path(),
                                                  "htp_arch": str(soc.htp_arch), "soc_model": str(soc.soc_model)})
    return opts


def _check_context_model(qdq_file: Path, ctx_file: Path) -> str:
    """The context binary a compiled EPContext model points to; refuses a graph not compiled whole."""
    if not ctx_file.is_file():
        raise RuntimeError(f"the QNN EP wrote no EPContext model for {qdq_file.name}")
    model = onnx.load(str(ctx_file), load_external_data=False)
    ops = {node.op_type for node in model.graph.node}
    if ops != {"EPContext"}:
        raise RuntimeError(f"{qdq_file.name} did not compile whole for the HTP: its context model still has {ops}")
    (node,) = model.graph.node
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    return attrs["ep_cache_context"].decode()


def compile_graphs(sources: list[tuple[Path, Path]], soc: SocTarget, share_weights: bool,
                   on_compiled: Callable[[int, ort.InferenceSession], None] | None = None,
                   progress: Callable[[str], None] | None = None) -> list[str]:
    """Compile each (QDQ file, EPContext file) pair; returns the context binaries written (one if shared).

    share_weights: all graphs go into ONE QNN context whose graphs share their weights (the QNN EP's
    `ep.share_ep_contexts` group, closed by `ep.stop_share_ep_contexts` on the last graph); every EPContext
    model then points at the one binary. on_compiled(i, session) may run graph i in its compile session,
    which executes on the HTP (the simulator here) inside that context.
    """
    say = progress or log.info
    binaries: list[str] = []
    for i, (qdq_file, ctx_file) in enumerate(sources):
        step = time.perf_counter()
        share = None if not share_weights else ("last" if i == len(sources) - 1 else "group")
        session = ort.InferenceSession(str(qdq_file), _compile_options(ctx_file, soc, share))
        if on_compiled is not None:
            on_compiled(i, session)
        del session
        say(f"[{i + 1}/{len(sources)}] compiled {qdq_file.stem} for {soc.name} ({time.perf_counter() - step:.1f} s)")
    for qdq_file, ctx_file in sources:  # a shared group's models exist only once the last one is compiled
        binary = _check_context_model(qdq_file, ctx_file)
        if not (ctx_file.parent / binary).is_file():
            raise RuntimeError(f"{ctx_file.name} points to the context binary {binary}, which was not written")
        binaries += [binary] if binary not in binaries else []
    if share_weights and len(binaries) != 1:
        raise RuntimeError(f"weight sharing should give one context binary, the QNN EP wrote {binaries}")
    return binaries


def compile_qnn_bundle(src: str | Path, out_dir: str | Path, soc_name: str, share_weights: bool = True,
                       progress: Callable[[str], None] | None = None,
                       on_compiled: Callable[[int, ort.InferenceSession], None] | None = None) -> Path:
    """Compile every graph of the QDQ bundle `src` for `soc_name` into a new bundle `out_dir` (atomically).

    share_weights (default): one context binary for all graphs, weights stored once: what a phone should
    load. The x86 HTP simulator cannot load such a binary back (runtime/qnn.py); compile with
    share_weights=False (one binary per graph, each with its own weights) to run the bundle there.
    """
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
        sources = [(src / g.file, tmp / f"{g.name}_ctx.onnx") for g in manifest.graphs]
        binaries = compile_graphs(sources, soc, share_weights, on_compiled, say)
        entries = [replace(g, file=ctx.name) for g, (_, ctx) in zip(manifest.graphs, sources, strict=True)]
        target = {"soc": soc.name, "chipset": soc.chipset, "htp_arch": soc.htp_arch, "soc_model": soc.soc_model,
                  "context_binaries": binaries, "weight_sharing": share_weights,
                  "context_bytes": sum((tmp / b).stat().st_size for b in binaries),
                  "onnxruntime": ort.__version__, "onnxruntime_qnn": getattr(qnn_module(), "__version__", None)}
        new = replace(manifest, graphs=entries, extras={**manifest.extras, "qnn": target})
        write_manifest(tmp, new)
    say(f"QNN bundle for {soc.name} written to {out_dir}: {len(binaries)} context binar"
        f"{'y' if len(binaries) == 1 else 'ies'}, {target['context_bytes'] / 1e6:.1f} MB "
        f"({time.perf_counter() - started:.1f} s)")
    return out_dir

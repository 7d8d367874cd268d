"""Running bundle graphs through onnxruntime's QNN execution provider (Qualcomm HTP; the simulator on x86).

onnxruntime-qnn 2.x is a plugin EP: its library is registered once per process with
`register_execution_provider_library`, and a session asks for it by device (`add_provider_for_devices`).
On x86 Linux the HTP backend is a functional simulator: right numbers, no meaningful latency.

CPU fallback is disabled by default: a graph the HTP cannot run whole is refused at load instead of
silently running partly on the CPU.

Weight-shared bundles (`compile-qnn`'s default: all graphs in one QNN context, weights stored once) load
with `ep.share_ep_contexts`, so that the sessions of the different widths take their graphs from one
loaded context instead of each loading the whole binary. The x86 simulator of onnxruntime-qnn 2.7.0 cannot
load such a binary when it holds more than one graph (measured: QNN_COMMON_ERROR_NOT_SUPPORTED from
contextCreateFromBinary with the option, a segmentation fault without it; a one-graph shared binary loads),
and onnxruntime's own weight-sharing test loads them only on ARM devices; so the runtime refuses them on
x86 with that explanation. Loading them on a device is untested here (no device).
"""

from __future__ import annotations

import logging
import platform
from typing import Any

import onnxruntime as ort

from .bundle import BundleError, Manifest

log = logging.getLogger(__name__)

QNN_EP = "QNNExecutionProvider"
DISABLE_CPU_FALLBACK = "session.disable_cpu_ep_fallback"
SHARE_EP_CONTEXTS = "ep.share_ep_contexts"
# platform.machine() of the phones and Snapdragon laptops that load shared binaries
ARM_MACHINES = ("aarch64", "arm64")
SIMULATED_HTP = {"htp_arch": 79, "soc_model": 69}  # Snapdragon 8 Elite, as export/qnn_compile.py's SOCS names it


def qnn_module() -> Any:
    try:
        import onnxruntime_qnn
    except ImportError as err:
        raise BundleError("the QNN execution provider is not installed: pip install 'mtpedge[qnn]' "
                          "(onnxruntime-qnn, with onnxruntime >= 1.24.2)") from err
    return onnxruntime_qnn


def qnn_devices() -> list:
    """The QNN EP's devices, registering its plugin library on first use."""
    module = qnn_module()
    devices = [d for d in ort.get_ep_devices() if d.ep_name == QNN_EP]
    if not devices:
        if not hasattr(ort, "register_execution_provider_library"):
            raise BundleError(f"onnxruntime {ort.__version__} cannot load plugin execution providers: "
                              "pip install 'onnxruntime>=1.24.2'")
        ort.register_execution_provider_library(QNN_EP, module.get_library_path())
        devices = [d for d in ort.get_ep_devices() if d.ep_name == QNN_EP]
    if not devices:
        raise BundleError("onnxruntime-qnn is installed but offers no device: its HTP backend failed to load")
    return devices


def qnn_provider_options(manifest: Manifest) -> dict[str, str]:
    """HTP backend + the SoC a bundle was compiled for (its context binaries only run there).

    A QDQ bundle (not compiled) on x86 runs on the simulator as the Snapdragon 8 Elite (v79), the one HTP
    tested here: left unset, the simulator's default architecture cannot finalize the recipe's fp16 nodes
    (QNN_COMMON_ERROR_MEM_ALLOC). On a device the EP takes the phone's own HTP.
    """
    options = {"backend_path": qnn_module().get_qnn_htp_path()}
    target = manifest.extras.get("qnn") or (SIMULATED_HTP if platform.machine().lower() not in ARM_MACHINES else {})
    for key in ("htp_arch", "soc_model"):
        if target.get(key) is not None:
            options[key] = str(target[key])
    return options


def add_qnn_provider(opts: ort.SessionOptions, manifest: Manifest, provider_options: dict[str, str] | None = None,
                     allow_cpu_fallback: bool = False) -> None:
    opts.add_provider_for_devices(qnn_devices(), {**qnn_provider_options(manifest), **(provider_options or {})})
    if manifest.extras.get("qnn", {}).get("weight_sharing"):
        opts.add_session_config_entry(SHARE_EP_CONTEXTS, "1")  # one loaded context for every width's session
    if not allow_cpu_fallback:
        opts.add_session_config_entry(DISABLE_CPU_FALLBACK, "1")


def check_qnn_bundle(manifest: Manifest, providers: list) -> None:
    """A bundle of compiled QNN context binaries runs only through the QNN EP of the SDK that compiled it."""
    target = manifest.extras.get("qnn")
    if not target or not target.get("context_binaries"):
        return
    names = [p if isinstance(p, str) else p[0] for p in providers]
    if QNN_EP not in names:
        raise BundleError(f"this bundle holds QNN context binaries for {target.get('soc')}: run it with the QNN "
                          "execution provider (--device qnn), or run the QDQ bundle it was compiled from on the CPU")
    if target.get("weight_sharing") and len(target["context_binaries"]) == 1 and len(manifest.graphs) > 1 \
            and platform.machine().lower() not in ARM_MACHINES:
        raise BundleError(f"this bundle's {len(manifest.graphs)} graphs share one weight-sharing context binary, which "
                          f"only a device loads: the HTP simulator on {platform.machine()} cannot (onnxruntime-qnn "
                          "refuses or crashes). To run it here, compile the QDQ bundle with "
                          "`mtpedge compile-qnn --no-share-weights` (one binary per graph)")
    installed = getattr(qnn_module(), "__version__", None)
    if installed != target.get("onnxruntime_qnn"):
        raise BundleError(f"the context binaries were compiled by onnxruntime-qnn {target.get('onnxruntime_qnn')}, "
                          f"this is {installed}: re-run `mtpedge compile-qnn` on the QDQ bundle, or install "
                          f"onnxruntime-qnn=={target.get('onnxruntime_qnn')}")

"""Running bundle graphs through onnxruntime's QNN execution provider (Qualcomm HTP; the simulator on x86).

onnxruntime-qnn 2.x is a plugin EP: its library is registered once per process with
`register_execution_provider_library`, and a session asks for it by device (`add_provider_for_devices`).
On x86 Linux the HTP backend is a functional simulator: right numbers, no meaningful latency.

CPU fallback is disabled by default: a graph the HTP cannot run whole is refused at load instead of
silently running partly on the CPU.
"""

from __future__ import annotations

import logging
from typing import Any

import onnxruntime as ort

from .bundle import BundleError, Manifest

log = logging.getLogger(__name__)

QNN_EP = "QNNExecutionProvider"
DISABLE_CPU_FALLBACK = "session.disable_cpu_ep_fallback"


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
    """HTP backend + the SoC a bundle was compiled for (its context binaries only run there)."""
    options = {"backend_path": qnn_module().get_qnn_htp_path()}
    target = manifest.extras.get("qnn", {})
    for key in ("htp_arch", "soc_model"):
        if target.get(key) is not None:
            options[key] = str(target[key])
    return options


def add_qnn_provider(opts: ort.SessionOptions, manifest: Manifest, provider_options: dict[str, str] | None = None,
                     allow_cpu_fallback: bool = False) -> None:
    opts.add_provider_for_devices(qnn_devices(), {**qnn_provider_options(manifest), **(provider_options or {})})
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
    installed = getattr(qnn_module(), "__version__", None)
    if installed != target.get("onnxruntime_qnn"):
        raise BundleError(f"the context binaries were compiled by onnxruntime-qnn {target.get('onnxruntime_qnn')}, "
                          f"this is {installed}: re-run `mtpedge compile-qnn` on the QDQ bundle, or install "
                          f"onnxruntime-qnn=={target.get('onnxruntime_qnn')}")

"""Qualcomm AI Hub jobs for a QDQ bundle: compile (+ link), profile, inference on real phones in the cloud.

The jobs are built as plain specs from the manifest (`build_jobs`) and submitted through a client object
(`submit_jobs`): the `qai_hub` module itself in real use, any object with the same five functions in tests.
Nothing here has run against the service: there is no API token or network where this was written. The
specs follow qai-hub 0.56's signatures (checked against the installed package), and the CLI says exactly
what is missing when the client has no token or no network.

    compile    each graph's QDQ ONNX -> a QNN context binary for the device (`--target_runtime qnn_context_binary`)
    link       all compiled graphs -> one context binary whose graphs share weights (prefill + decode)
    profile    the compiled graphs on the device (latency, memory, NPU placement); their latencies become
               the bundle's cost table (runtime/cost_table.py, origin "aihub-profile"), which sizes draft trees
    inference  one recorded call per graph on the device (outputs to compare with the CPU QDQ graph)

The profile a job returns (`ProfileJob.download_profile()`) is a dict whose form qai-hub 0.56 defines in
`qai_hub/client.py` (`_profile_pb_to_python_dict`): {"execution_summary": {"estimated_inference_time": us,
"all_inference_times": [us, ...] (profile format 1.2 and later), ...}, "execution_detail": [{"name", "type",
"compute_unit", "execution_time"?}, ...]}, times in microseconds (the client's InferenceJobResult docs;
its report divides them by 1000 for milliseconds).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from mtpedge.runtime.bundle import Manifest, read_manifest
from mtpedge.runtime.contract import CACHE_SLOTS
from mtpedge.runtime.cost_table import CostTable, decode_widths

log = logging.getLogger(__name__)

ACTIONS = ("compile", "profile", "inference")
COMPILE_OPTIONS = "--target_runtime qnn_context_binary"
PROFILE_OPTIONS = "--max_profiler_iterations 20"


@dataclass(frozen=True)
class HubDevice:
    """A device by exact AI Hub name ("Samsung Galaxy S25 (Family)") or by chipset ("qualcomm-snapdragon-8-elite")."""

    name: str = ""
    chipset: str = ""

    def __post_init__(self) -> None:
        if bool(self.name) == bool(self.chipset):
            raise ValueError("name a device (--device) or a chipset (--chipset), exactly one of them")

    def make(self, client: Any) -> Any:
        return client.Device(name=self.name) if self.name else client.Device(attributes=f"chipset:{self.chipset}")


@dataclass(frozen=True)
class HubJob:
    kind: str  # compile | link | profile | inference
    name: str
    graph: str | None  # the bundle graph (None for link: all of them)
    model: str | None  # a file or folder for compile; None: the compile job's target model
    options: str = ""
    input_specs: dict[str, tuple[tuple[int, ...], str]] = field(default_factory=dict)


def input_specs(manifest: Manifest, graph: str) -> dict[str, tuple[tuple[int, ...], str]]:
    """name -> (shape, dtype) in the graph's input order, as qai_hub's input_specs wants them."""
    entry = next(g for g in manifest.graphs if g.name == graph)
    return {name: (tuple(shape), "int64" if name == CACHE_SLOTS else "float32") for name, shape in entry.inputs.items()}


def build_jobs(bundle: str | Path, device: HubDevice, action: str, link: bool = True) -> list[HubJob]:
    """The jobs `action` needs for every graph of a QDQ bundle, in submission order."""
    if action not in ACTIONS:
        raise ValueError(f"unknown AI Hub action {action!r}: choose one of {', '.join(ACTIONS)}")
    folder = Path(bundle)
    manifest = read_manifest(folder)
    if "qdq" not in manifest.extras:
        raise ValueError(f"{folder} is not a QDQ bundle: AI Hub compiles quantized graphs for the NPU; "
                         "run `mtpedge export --precision qdq` first")
    target = device.name or device.chipset
    jobs = [HubJob("compile", f"{manifest.model_name}-{g.name}-{target}", g.name, str(folder / g.file),
                   COMPILE_OPTIONS, input_specs(manifest, g.name)) for g in manifest.graphs]
    if link and len(manifest.graphs) > 1:
        jobs.append(HubJob("link", f"{manifest.model_name}-linked-{target}", None, None))
    if action == "profile":
        jobs += [HubJob("profile", f"{manifest.model_name}-{g.name}-profile", g.name, None, PROFILE_OPTIONS)
                 for g in manifest.graphs]
    if action == "inference":
        jobs += [HubJob("inference", f"{manifest.model_name}-{g.name}-inference", g.name, None)
                 for g in manifest.graphs]
    return jobs


def inference_inputs(manifest: Manifest, graph: str, seed: int = 0) -> dict[str, list[np.ndarray]]:
    """One call's inputs (a qai_hub dataset): small random embeddings, an all-visible bias, position-0 rope."""
    rng = np.random.default_rng(seed)
    entry = next(g for g in manifest.graphs if g.name == graph)
    data = {}
    for name, shape in entry.inputs.items():
        if name == CACHE_SLOTS:  # a chain at position 0
            value = np.arange(shape[-1], dtype=np.int64).reshape(shape)
        elif name == "rope_cos":
            value = np.ones(shape, np.float32)
        elif name in ("rope_sin", "attention_bias") or name.startswith("past_"):
            value = np.zeros(shape, np.float32)
        else:
            value = rng.normal(0, 0.05, shape).astype(np.float32)
        data[name] = [value]
    return data


def _model_for_upload(path: Path) -> Any:
    """A graph whose weights live in the bundle's shared file, loaded whole (qai_hub uploads a ModelProto)."""
    return onnx.load(str(path))


def submit_jobs(jobs: list[HubJob], device: HubDevice, client: Any, bundle: str | Path) -> dict[str, Any]:
    """Submit `jobs` through `client` (the qai_hub module, or a stand-in with its functions); returns jobs by name."""
    folder = Path(bundle)
    manifest = read_manifest(folder)
    hub_device = device.make(client)
    submitted: dict[str, Any] = {}
    compiled: dict[str, Any] = {}
    for job in jobs:
        if job.kind == "compile":
            submitted[job.name] = compiled[job.graph] = client.submit_compile_job(
                model=_model_for_upload(Path(job.model)), device=hub_device, name=job.name,
                input_specs=job.input_specs, options=job.options)
        elif job.kind == "link":
            models = [compiled[g.name].get_target_model() for g in manifest.graphs]
            submitted[job.name] = client.submit_link_job(models, device=hub_device, name=job.name)
        elif job.kind == "profile":
            submitted[job.name] = client.submit_profile_job(
                model=compiled[job.graph].get_target_model(), device=hub_device, name=job.name, options=job.options)
        elif job.kind == "inference":
            submitted[job.name] = client.submit_inference_job(
                model=compiled[job.graph].get_target_model(), device=hub_device, name=job.name,
                inputs=inference_inputs(manifest, job.graph), options=job.options)
        else:
            raise ValueError(f"unknown job kind {job.kind!r}")
        log.info("submitted %s job %s", job.kind, job.name)
    return submitted


def profile_seconds(profile: dict, graph: str) -> float:
    """Seconds per call from one downloaded profile: the median of its measured iterations, or the
    service's own estimate when the profile predates per-iteration times."""
    try:
        summary = profile["execution_summary"]
        times = summary.get("all_inference_times") or [summary["estimated_inference_time"]]
        seconds = float(np.median([float(t) for t in times])) / 1e6  # microseconds
    except (KeyError, TypeError, ValueError) as err:
        raise ValueError(f"the AI Hub profile of {graph} has no inference time ({err!r}): it is not a "
                         "ProfileJob.download_profile() result of a finished job") from err
    if not seconds > 0:
        raise ValueError(f"the AI Hub profile of {graph} reports an inference time of {seconds} s")
    return seconds


def cost_table_from_profiles(manifest: Manifest, profiles: dict[str, dict], device: str) -> CostTable:
    """The bundle's cost table (seconds per decode call, by width) from one profile per decode graph."""
    by_width = {g.width: g.name for g in manifest.graphs if g.kind == "decode"}
    missing = [name for name in by_width.values() if name not in profiles]
    if missing:
        raise ValueError(f"no AI Hub profile for the decode graphs {missing}: profile every graph "
                         "(`mtpedge hub profile`) before writing a cost table")
    seconds = {w: profile_seconds(profiles[name], name) for w, name in by_width.items()}
    assert sorted(seconds) == decode_widths(manifest)
    return CostTable(seconds, manifest.model_name, manifest.source_sha256, manifest.context, device,
                     "aihub-profile")


def write_profile_cost_table(jobs: list[HubJob], submitted: dict[str, Any], bundle: str | Path,
                             device: HubDevice, path: str | Path) -> CostTable:
    """Wait for the submitted profile jobs, download their profiles and save the cost table at `path`."""
    manifest = read_manifest(bundle)
    profiles = {job.graph: submitted[job.name].download_profile() for job in jobs if job.kind == "profile"}
    table = cost_table_from_profiles(manifest, profiles, f"{device.name or device.chipset} (Qualcomm AI Hub "
                                     "profile, QNN context binary on the NPU)")
    table.save(path)
    return table


def hub_client() -> Any:
    """The qai_hub module, or a SystemExit that says how to install it."""
    try:
        import qai_hub
    except ImportError as err:
        raise SystemExit("Qualcomm AI Hub jobs need the aihub extra: pip install 'mtpedge[aihub]' "
                         "(a separate environment is safest: qai-hub wants protobuf <= 6.31.1)") from err
    return qai_hub


def explain_hub_error(err: Exception) -> str:
    """A one-paragraph reason for a failed submission: no token, no network, or the service's own message."""
    text = str(err)
    if "client.ini" in text or "api_token" in text.lower() or "configuration" in text.lower():
        return ("no Qualcomm AI Hub API token is configured: get one at https://aihub.qualcomm.com, then run "
                "`qai-hub configure --api_token TOKEN` (or use --dry-run to only write the job specs)")
    if any(word in text.lower() for word in ("connection", "resolve", "timed out", "network", "unreachable")):
        return f"Qualcomm AI Hub cannot be reached (no network?): {text.splitlines()[0]}"
    return f"Qualcomm AI Hub refused the job: {text.splitlines()[0] if text else type(err).__name__}"

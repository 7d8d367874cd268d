"""Qualcomm AI Hub job specs, submitted offline through a stand-in client (no token or network here).

The stand-in records each call with the arguments the real qai_hub functions take (qai-hub 0.56); it checks
what mtpedge builds, not what the service does.
"""

from __future__ import annotations

import json

import onnx
import pytest

from mtpedge.export import aihub
from mtpedge.export.aihub import HubDevice, build_jobs, explain_hub_error, submit_jobs, write_profile_cost_table
from mtpedge.runtime.bundle import read_manifest
from mtpedge.runtime.cost_table import CostTable


def documented_profile(inference_us: list[int], minor_version: int = 2) -> dict:
    """A `ProfileJob.download_profile()` result, built here by hand in the form qai-hub 0.56 documents and
    produces (`qai_hub/client.py`, `_profile_pb_to_python_dict`; times in microseconds): not a real profile."""
    summary = {"estimated_inference_time": inference_us[0], "estimated_inference_peak_memory": 166711296,
               "first_load_time": 1374293, "first_load_peak_memory": 166711296, "warm_load_time": 277823,
               "warm_load_peak_memory": 163520512, "compile_time": 0, "compile_peak_memory": 0}
    if minor_version >= 2:  # per-iteration times arrived with profile format 1.2
        summary.update({"all_compile_times": [1], "all_first_load_times": [1374293],
                        "all_warm_load_times": [277823], "all_inference_times": list(inference_us)})
    detail = [{"name": "/layers.0/self_attn/q_proj/MatMul", "type": "MatMul", "compute_unit": "NPU",
               "execution_time": 127}]
    return {"execution_summary": summary, "execution_detail": detail}


class FakeJob:
    def __init__(self, kind: str, name: str, profile: dict | None = None) -> None:
        self.kind, self.name, self.url = kind, name, f"https://hub.example/jobs/{name}"
        self.profile = profile

    def get_target_model(self) -> str:
        return f"target-of-{self.name}"

    def download_profile(self) -> dict:  # qai_hub's ProfileJob blocks until the job ends, then returns the dict
        return self.profile


class FakeHub:
    """Records calls with qai_hub's keyword names; raises on anything the real signatures would refuse."""

    def __init__(self, profiles: dict[str, dict] | None = None) -> None:
        self.calls: list[tuple[str, dict]] = []
        self.profiles = profiles or {}  # profile job name -> what its download_profile() returns

    def Device(self, name: str = "", os: str = "", attributes: str | list[str] = ()):  # noqa: N802 - qai_hub's name
        return ("device", name, attributes)

    def submit_compile_job(self, model, device, name=None, input_specs=None, options="", single_compile=True,
                           calibration_data=None, retry=True, project=None):
        self.calls.append(("compile", dict(model=model, device=device, name=name, input_specs=input_specs,
                                           options=options)))
        return FakeJob("compile", name)

    def submit_link_job(self, models, device, name=None, options="", project=None):
        self.calls.append(("link", dict(models=models, device=device, name=name)))
        return FakeJob("link", name)

    def submit_profile_job(self, model, device, name=None, options="", retry=True, project=None):
        self.calls.append(("profile", dict(model=model, device=device, name=name, options=options)))
        return FakeJob("profile", name, self.profiles.get(name))

    def submit_inference_job(self, model, device, inputs=None, name=None, options="", retry=True, profile=True,
                             project=None):
        self.calls.append(("inference", dict(model=model, device=device, inputs=inputs, name=name)))
        return FakeJob("inference", name)


@pytest.fixture(scope="module")
def qdq_small(tiny_model_dir, tmp_path_factory):
    from mtpedge.export.bundle_writer import ExportConfig, export_bundle
    from mtpedge.export.qdq import QdqConfig

    config = ExportConfig(context=32, prefill_width=8, decode_widths=(1,), quantization=QdqConfig(samples_per_graph=4))
    return export_bundle(tiny_model_dir("llama"), tmp_path_factory.mktemp("hub") / "qdq", config)


def test_compile_jobs_carry_the_manifest_input_specs_and_link_the_graphs(qdq_small):
    manifest = read_manifest(qdq_small)
    device = HubDevice(chipset="qualcomm-snapdragon-8-elite")
    hub = FakeHub()
    submitted = submit_jobs(build_jobs(qdq_small, device, "compile"), device, hub, qdq_small)
    kinds = [kind for kind, _ in hub.calls]
    assert kinds == ["compile"] * len(manifest.graphs) + ["link"]
    for (_, call), entry in zip(hub.calls, manifest.graphs, strict=False):
        assert call["device"] == ("device", "", "chipset:qualcomm-snapdragon-8-elite")
        assert list(call["input_specs"]) == list(entry.inputs)  # the graph's own input order
        assert call["input_specs"]["attention_bias"] == (tuple(entry.inputs["attention_bias"]), "float32")
        assert call["input_specs"]["cache_slots"] == ((1, entry.width), "int64")
        assert call["options"] == "--target_runtime qnn_context_binary"
        assert isinstance(call["model"], onnx.ModelProto)
        assert any(n.op_type == "QuantizeLinear" for n in call["model"].graph.node)
    link = hub.calls[-1][1]
    assert link["models"] == [f"target-of-{manifest.model_name}-{g.name}-qualcomm-snapdragon-8-elite"
                              for g in manifest.graphs]
    assert len(submitted) == len(manifest.graphs) + 1


def test_profile_and_inference_jobs_run_the_compiled_models(qdq_small):
    manifest = read_manifest(qdq_small)
    device = HubDevice(name="Samsung Galaxy S25 (Family)")
    for action in ("profile", "inference"):
        hub = FakeHub()
        submit_jobs(build_jobs(qdq_small, device, action, link=False), device, hub, qdq_small)
        runs = [call for kind, call in hub.calls if kind == action]
        assert len(runs) == len(manifest.graphs)
        for call, entry in zip(runs, manifest.graphs, strict=True):
            assert call["model"].startswith("target-of-") and entry.name in call["model"]
            assert call["device"] == ("device", "Samsung Galaxy S25 (Family)", ())
            if action == "inference":
                assert {k: v[0].shape for k, v in call["inputs"].items()} == \
                    {k: tuple(s) for k, s in entry.inputs.items()}


def test_job_specs_refuse_bad_requests(qdq_small, tiny_bundle):
    with pytest.raises(ValueError, match="exactly one"):
        HubDevice()
    with pytest.raises(ValueError, match="not a QDQ bundle"):
        build_jobs(tiny_bundle("llama"), HubDevice(chipset="x"), "compile")
    with pytest.raises(ValueError, match="unknown AI Hub action"):
        build_jobs(qdq_small, HubDevice(chipset="x"), "train")


def test_hub_errors_are_explained():
    no_token = RuntimeError("Failed to load client configuration file.\n/root/.qai_hub/client.ini not found.")
    assert "qai-hub configure --api_token" in explain_hub_error(no_token)
    assert "cannot be reached" in explain_hub_error(ConnectionError("Failed to resolve 'app.aihub.qualcomm.com'"))


def test_hub_cli_dry_run_prints_the_specs(qdq_small, capsys):
    from mtpedge.main import main

    assert main(["hub", "profile", str(qdq_small), "--chipset", "qualcomm-snapdragon-8-elite", "--dry-run"]) == 0
    specs = json.loads(capsys.readouterr().out)
    assert [s["kind"] for s in specs].count("profile") == len(read_manifest(qdq_small).graphs)


def profiles_for(manifest, us_per_width) -> dict[str, dict]:
    return {f"{manifest.model_name}-{g.name}-profile": documented_profile(us_per_width(g.width))
            for g in manifest.graphs}


def test_profile_results_become_the_bundles_cost_table(qdq_small, tmp_path):
    """Profile jobs -> their documented results -> the cost table the runtime reads (no network)."""
    manifest = read_manifest(qdq_small)
    device = HubDevice(chipset="qualcomm-snapdragon-8-elite")
    hub = FakeHub(profiles_for(manifest, lambda width: [9000 + 10 * width, 4000 + width, 4200 + width]))
    jobs = build_jobs(qdq_small, device, "profile")
    written = write_profile_cost_table(jobs, submit_jobs(jobs, device, hub, qdq_small), qdq_small, device,
                                       tmp_path / "cost.json")
    table = CostTable.load(tmp_path / "cost.json")
    assert table == written and table.origin == "aihub-profile" and table.check(manifest) is None
    assert (table.model_name, table.source_sha256, table.context) == \
        (manifest.model_name, manifest.source_sha256, manifest.context)
    decode = {g.width for g in manifest.graphs if g.kind == "decode"}
    assert table.seconds == {w: (4200 + w) / 1e6 for w in decode}  # median of the iterations, in seconds
    assert "qualcomm-snapdragon-8-elite" in table.device


def test_profile_cost_table_edge_cases(qdq_small):
    manifest = read_manifest(qdq_small)
    names = {g.width: g.name for g in manifest.graphs}
    old = {g.name: documented_profile([5000 + g.width], minor_version=1) for g in manifest.graphs}
    table = aihub.cost_table_from_profiles(manifest, old, "d")  # before format 1.2: the service's estimate
    assert table.seconds == {g.width: (5000 + g.width) / 1e6 for g in manifest.graphs if g.kind == "decode"}
    with pytest.raises(ValueError, match="no AI Hub profile for the decode graphs"):
        aihub.cost_table_from_profiles(manifest, {}, "d")
    broken = {**old, names[1]: {"execution_detail": []}}
    with pytest.raises(ValueError, match="has no inference time"):
        aihub.cost_table_from_profiles(manifest, broken, "d")


def test_hub_cli_profile_writes_the_cost_file(qdq_small, tmp_path, monkeypatch, capsys):
    from mtpedge.main import main

    manifest = read_manifest(qdq_small)
    hub = FakeHub(profiles_for(manifest, lambda width: [3000 * width]))
    monkeypatch.setattr(aihub, "hub_client", lambda: hub)
    path = tmp_path / "phone.json"
    assert main(["hub", "profile", str(qdq_small), "--chipset", "qualcomm-snapdragon-8-elite",
                 "--cost-file", str(path)]) == 0
    assert "cost table written to" in capsys.readouterr().out
    assert CostTable.load(path).seconds[1] == pytest.approx(0.003)

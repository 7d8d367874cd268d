"""Qualcomm AI Hub job specs, submitted offline through a stand-in client (no token or network here).

The stand-in records each call with the arguments the real qai_hub functions take (qai-hub 0.56); it checks
what mtpedge builds, not what the service does.
"""

from __future__ import annotations

import json

import onnx
import pytest

from mtpedge.export.aihub import HubDevice, build_jobs, explain_hub_error, submit_jobs
from mtpedge.runtime.bundle import read_manifest


class FakeJob:
    def __init__(self, kind: str, name: str) -> None:
        self.kind, self.name, self.url = kind, name, f"https://hub.example/jobs/{name}"

    def get_target_model(self) -> str:
        return f"target-of-{self.name}"


class FakeHub:
    """Records calls with qai_hub's keyword names; raises on anything the real signatures would refuse."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict]] = []

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
        return FakeJob("profile", name)

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

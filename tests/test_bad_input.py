"""Every way the input can be wrong gets a clear error naming the problem and the fix; nothing half-written."""

from __future__ import annotations

import json
import shutil

import pytest

from mtpedge.export.bundle_writer import ExportConfig, export_bundle
from mtpedge.main import main
from mtpedge.models.loading import ModelLoadError, load_model
from mtpedge.runtime.bundle import BundleError, read_manifest
from mtpedge.runtime.engine import Engine
from mtpedge.runtime.generate import generate
from mtpedge.runtime.kv_cache import ContextOverflowError
from mtpedge.runtime.sampling import NonFiniteLogitsError
from tests.conftest import copy_bundle, edit_manifest


def test_missing_model_path(tmp_path):
    with pytest.raises(ModelLoadError, match="does not exist"):
        load_model(tmp_path / "nope.gguf")


def test_file_that_is_not_gguf(tmp_path):
    bad = tmp_path / "model.gguf"
    bad.write_bytes(b"PK\x03\x04 this is a zip")
    with pytest.raises(ModelLoadError, match="GGUF magic"):
        load_model(bad)
    other = tmp_path / "model.bin"
    other.write_bytes(b"x")
    with pytest.raises(ModelLoadError, match="not a .gguf file"):
        load_model(other)


def test_truncated_gguf(tmp_path):
    from mtpedge.models.loading import default_model_path

    cut = tmp_path / "cut.gguf"
    with open(default_model_path(), "rb") as f:
        cut.write_bytes(f.read(300_000))  # header intact, tensor data missing
    with pytest.raises(ModelLoadError, match="cut.gguf"):
        load_model(cut)


def model_copy(tiny_model_dir, folder, **config_changes):
    """A copy of the tiny LLaMA model folder with config.json changed as given."""
    shutil.copytree(tiny_model_dir("llama"), folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, **config_changes}))
    return folder


def test_unsupported_architecture(tmp_path, tiny_model_dir):
    folder = model_copy(tiny_model_dir, tmp_path / "gpt2ish", model_type="gpt2", architectures=["GPT2LMHeadModel"])
    with pytest.raises(ModelLoadError, match="gpt2.*not supported"):
        load_model(folder)


def test_folder_without_weights_or_config(tmp_path, tiny_model_dir):
    with pytest.raises(ModelLoadError, match="no config.json"):
        load_model(tmp_path)
    folder = model_copy(tiny_model_dir, tmp_path / "noweights")
    for f in folder.glob("*.safetensors"):
        f.unlink()
    with pytest.raises(ModelLoadError, match="no .*safetensors"):
        load_model(folder)


def test_damaged_weights_shape(tmp_path, tiny_model_dir):
    size = json.loads((tiny_model_dir("llama") / "config.json").read_text())["intermediate_size"]
    folder = model_copy(tiny_model_dir, tmp_path / "damaged", intermediate_size=size + 8)  # config and tensors disagree
    with pytest.raises(ModelLoadError):
        load_model(folder)


def copy_tiny_bundle(tiny_bundle, tmp_path):
    return copy_bundle(tiny_bundle("llama"), tmp_path)


def test_bundle_from_another_version(tmp_path, tiny_bundle):
    folder = copy_tiny_bundle(tiny_bundle, tmp_path)
    edit_manifest(folder, lambda d: d.update(version=99))
    with pytest.raises(BundleError, match="version 99.*re-export"):
        Engine.load(folder)


def test_bundle_with_mismatching_graph_shapes(tmp_path, tiny_bundle):
    folder = copy_tiny_bundle(tiny_bundle, tmp_path)

    def widen(d):
        d["config"]["hidden_size"] += 2

    edit_manifest(folder, widen)
    with pytest.raises(BundleError, match="do not match the model config"):
        read_manifest(folder)


def test_bundle_graph_swapped_from_another_export(tmp_path, tiny_bundle):
    folder = copy_tiny_bundle(tiny_bundle, tmp_path)
    (folder / "decode_ar1_cl256.onnx").write_bytes((folder / "decode_ar8_cl256.onnx").read_bytes())
    with pytest.raises(BundleError, match="differ from the manifest"):
        Engine.load(folder)


def test_bundle_missing_files_or_manifest(tmp_path, tiny_bundle):
    folder = copy_tiny_bundle(tiny_bundle, tmp_path)
    (folder / "embeddings.npy").unlink()
    with pytest.raises(BundleError, match="lacks.*embeddings.npy"):
        Engine.load(folder)
    (folder / "manifest.json").unlink()
    with pytest.raises(BundleError, match="not an mtpedge bundle"):
        Engine.load(folder)
    with pytest.raises(BundleError, match="does not exist"):
        Engine.load(tmp_path / "nowhere")


def test_prompt_longer_than_the_context(tiny_bundle):
    engine = Engine.load(tiny_bundle("llama"))
    with pytest.raises(ContextOverflowError, match="prompt has 300 tokens.*context is 256"):
        generate(engine, [5] * 300, max_new_tokens=4)


def test_context_filling_up_during_generation(tiny_bundle):
    engine = Engine.load(tiny_bundle("llama"))
    with pytest.raises(ContextOverflowError, match="--context"):
        generate(engine, [5] * 250, max_new_tokens=20, stop_token_ids=set())
    result = generate(engine, [5] * 250, max_new_tokens=20, stop_token_ids=set(), on_overflow="stop")
    assert result.stats.finish_reason == "length"
    assert len(result.token_ids) == 256 - 250 + 1  # every position used, plus the token the last call chose


def test_interrupted_export_leaves_no_half_bundle(tmp_path, tiny_model_dir, monkeypatch):
    import mtpedge.export.bundle_writer as writer

    out = tmp_path / "bundle"
    calls = {"n": 0}
    real_trace = writer.trace_graph

    def trace_then_die(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt
        return real_trace(*args, **kwargs)

    monkeypatch.setattr(writer, "trace_graph", trace_then_die)
    config = ExportConfig(context=64, prefill_width=8, decode_widths=(1,))
    with pytest.raises(KeyboardInterrupt):
        export_bundle(tiny_model_dir("llama"), out, config)
    assert list(tmp_path.iterdir()) == []  # neither the bundle nor its temporary folder

    monkeypatch.setattr(writer, "trace_graph", real_trace)
    export_bundle(tiny_model_dir("llama"), out, config)
    before = (out / "manifest.json").read_text()
    calls["n"] = 0
    monkeypatch.setattr(writer, "trace_graph", trace_then_die)
    with pytest.raises(KeyboardInterrupt):
        export_bundle(tiny_model_dir("llama"), out, config)
    assert (out / "manifest.json").read_text() == before  # the previous bundle is untouched
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bundle"]


def test_cli_reports_errors_without_a_traceback(tmp_path, capsys, tiny_bundle):
    assert main(["generate", "hi", "--bundle", str(tmp_path / "missing")]) == 2
    assert "does not exist" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:
        main(["generate", "hi", "--no-such-option"])
    assert exit_info.value.code == 2
    assert "unrecognized arguments: --no-such-option" in capsys.readouterr().err
    assert main(["export", str(tmp_path / "missing.gguf"), "--out", str(tmp_path / "b")]) == 2
    with pytest.raises(SystemExit) as exit_info:
        main(["generate", "hi", "--bundle", str(tiny_bundle("llama")), "--drafter", "nope"])
    assert exit_info.value.code == 2
    assert "argument --drafter: unknown drafter 'nope'" in capsys.readouterr().err


def test_garbage_in_the_weights_stops_generation_with_a_clear_error(tmp_path, tiny_bundle, capsys):
    folder = copy_tiny_bundle(tiny_bundle, tmp_path)
    weights = folder / "weights.data"
    with open(weights, "r+b") as handle:  # 4 KB of NaN in the middle: same size, so the load check passes
        handle.seek(weights.stat().st_size // 2)
        handle.write(b"\xff" * 4096)
    engine = Engine.load(folder)
    with pytest.raises(NonFiniteLogitsError, match="not numbers"):
        generate(engine, [5, 6, 7], max_new_tokens=8)
    assert main(["generate", "hi", "--bundle", str(folder)]) == 2
    assert "not numbers" in capsys.readouterr().err

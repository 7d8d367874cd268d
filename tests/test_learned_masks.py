"""Learned masks as a file: format checks, attaching them at export, and the drafters using them losslessly."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pytest

from mtpedge.export.bundle_writer import ExportConfig, export_bundle
from mtpedge.export.learned_masks import (
    DEFAULT_MASKS,
    LearnedMasks,
    MasksFileError,
    load_masks_file,
    save_masks_file,
)
from mtpedge.main import main
from mtpedge.models.loading import load_model
from mtpedge.runtime.bundle import BUNDLE_VERSION
from mtpedge.runtime.drafters import make_drafter
from mtpedge.runtime.engine import Engine
from mtpedge.runtime.generate import generate


@pytest.fixture(scope="module")
def tiny(tiny_model_dir):
    return load_model(tiny_model_dir("llama"))


def masks_for(loaded, k=1, seed=0, sha=None) -> LearnedMasks:
    rng = np.random.default_rng(seed)
    masks = rng.standard_normal((k, loaded.config.hidden_size)).astype(np.float32)
    return LearnedMasks(masks, sha or loaded.source_sha256, loaded.name, {"steps": 7})


def test_masks_file_round_trip_and_malformed_files(tmp_path, tiny):
    learned = masks_for(tiny, k=2)
    path = save_masks_file(tmp_path / "m.npz", learned)
    back = load_masks_file(path)
    assert np.array_equal(back.masks, learned.masks) and back.source_sha256 == tiny.source_sha256
    assert back.training == {"steps": 7}
    with pytest.raises(MasksFileError, match="does not exist"):
        load_masks_file(tmp_path / "missing.npz")
    (tmp_path / "junk.npz").write_bytes(b"not a zip")
    with pytest.raises(MasksFileError, match="not an mtpedge masks file"):
        load_masks_file(tmp_path / "junk.npz")
    np.savez(tmp_path / "other.npz", masks=learned.masks, header=np.array(json.dumps({"format": "x"})))
    with pytest.raises(MasksFileError, match="format 'x'"):
        load_masks_file(tmp_path / "other.npz")
    with pytest.raises(MasksFileError, match="NaN"):
        LearnedMasks(np.full((1, 4), np.nan, dtype=np.float32), "", "", {})
    with pytest.raises(MasksFileError, match="k in 1..3"):
        LearnedMasks(np.zeros((4, 4), dtype=np.float32), "", "", {})


def test_shipped_masks_are_for_the_default_model():
    shipped = load_masks_file(DEFAULT_MASKS)
    assert shipped.masks.shape == (1, 576) and shipped.masks.dtype == np.float32
    assert shipped.source_sha256 == "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
    assert shipped.training["data"]["samples"] == 192 and shipped.training["steps"] == 350


def test_export_attaches_masks_and_hybrid_uses_them_losslessly(tmp_path, tiny):
    path = save_masks_file(tmp_path / "m.npz", masks_for(tiny, k=2))
    config = ExportConfig(context=128, prefill_width=16, decode_widths=(1, 16), check_parity=False,
                          learned_masks=str(path))
    engine = Engine.load(export_bundle(tiny, tmp_path / "bundle", config))
    mtp = engine.manifest.extras["mtp"]
    assert mtp["k"] == 2 and mtp["rank"] == 0 and mtp["masks_origin"] == "m.npz"
    for options in ({}, {"masks": 2, "width": 8}):
        drafter = make_drafter("hybrid", engine, **options)
        assert drafter.settings["mask_init"] == "learned" and drafter.settings["mask_update"] == 0.0
        assert np.array_equal(drafter.probe.masks.learned, masks_for(tiny, k=2).masks)
        rng = np.random.default_rng(1)
        for _ in range(4):
            prompt = rng.integers(0, engine.config.vocab_size, size=int(rng.integers(2, 20))).tolist()
            prompt = prompt + prompt[:5]
            plain = generate(engine, prompt, 30, stop_token_ids=set())
            drafted = generate(engine, prompt, 30, stop_token_ids=set(), drafter=drafter)
            assert drafted.token_ids == plain.token_ids


def test_masks_attach_to_a_quantized_bundle_too_but_not_to_qdq(tmp_path, tiny):
    from mtpedge.export.qdq import QdqConfig
    from mtpedge.export.quant_config import QuantConfig

    path = save_masks_file(tmp_path / "m.npz", masks_for(tiny))
    int8 = QuantConfig("int8", block_size=16, quality_report=False)
    config = ExportConfig(context=64, prefill_width=16, decode_widths=(1, 8), check_parity=False,
                          learned_masks=str(path), quantization=int8)
    engine = Engine.load(export_bundle(tiny, tmp_path / "q", config))
    assert engine.manifest.graphs[0].precision == "int8-b16" and engine.manifest.extras["mtp"]["k"] == 1
    drafter = make_drafter("hybrid", engine, width=8)
    assert np.array_equal(drafter.probe.masks.learned, masks_for(tiny).masks)
    prompt = list(range(3, 20)) * 2
    assert (generate(engine, prompt, 24, stop_token_ids=set(), drafter=drafter).token_ids
            == generate(engine, prompt, 24, stop_token_ids=set()).token_ids)
    with pytest.raises(ValueError, match="not QDQ"):
        ExportConfig(learned_masks=str(path), quantization=QdqConfig())


def test_auto_attaches_nothing_to_other_weights_and_none_is_none(tmp_path, tiny):
    for choice in ("auto", "none"):
        config = ExportConfig(context=64, prefill_width=16, decode_widths=(1, 4), check_parity=False,
                              tree_templates=False, learned_masks=choice)
        engine = Engine.load(export_bundle(tiny, tmp_path / choice, config))
        assert "mtp" not in engine.manifest.extras
        assert make_drafter("hybrid", engine).settings["mask_init"] == "mean"


def test_masks_for_other_weights_are_refused_with_a_clear_error(tmp_path, tiny, tiny_model_dir, capsys):
    wrong = save_masks_file(tmp_path / "wrong.npz", masks_for(tiny, sha="ab" * 32))
    config = ExportConfig(context=64, prefill_width=16, decode_widths=(1,), check_parity=False,
                          learned_masks=str(wrong))
    with pytest.raises(MasksFileError, match="trained on other weights"):
        export_bundle(tiny, tmp_path / "b", config)
    assert not (tmp_path / "b").exists()
    narrow = save_masks_file(tmp_path / "n.npz", LearnedMasks(np.zeros((1, 3), np.float32), tiny.source_sha256, "", {}))
    with pytest.raises(MasksFileError, match="hidden size"):
        export_bundle(tiny, tmp_path / "b", ExportConfig(context=64, prefill_width=16, decode_widths=(1,),
                                                         learned_masks=str(narrow)))
    rc = main(["export", str(tiny_model_dir("llama")), "--out", str(tmp_path / "c"), "--masks", str(wrong),
               "--precision", "float32"])
    assert rc != 0 and "trained on other weights" in capsys.readouterr().err
    with pytest.raises(ValueError, match="--masks and --mtp-adapter"):
        ExportConfig(learned_masks=str(wrong), mtp_adapter="a.pt")


def _fake_default_bundle(folder, masks_file: str | None, source_sha256: str, adapter_sha256: str = "") -> None:
    folder.mkdir(parents=True, exist_ok=True)
    from mtpedge.export.quant_config import fast_recipe

    # as the fast recipe records it
    from mtpedge.runtime.kernels import RECIPE_VERSION

    config = json.loads(json.dumps(asdict(fast_recipe())))
    recipe = {"quantization": {"config": config, "kernels_recipe": RECIPE_VERSION}}
    mtp = {"masks_file": masks_file, **({"checkpoint_sha256": adapter_sha256} if adapter_sha256 else {})}
    extras = {**recipe, **({"mtp": mtp} if masks_file else {})}
    (folder / "manifest.json").write_text(json.dumps({"version": BUNDLE_VERSION, "extras": extras,
                                                          "source_sha256": source_sha256}))


def test_a_cached_default_bundle_without_the_shipped_masks_is_re_exported(tmp_path, monkeypatch):
    from types import SimpleNamespace

    import mtpedge.bundles as bundles
    import mtpedge.export.bundle_writer as writer

    monkeypatch.setenv("MTPEDGE_CACHE", str(tmp_path))
    monkeypatch.setattr(bundles, "_other_decode_widths", lambda folder: None)  # checked on its own
    monkeypatch.setattr(bundles, "_predates_shipped_table", lambda folder: False)  # the fake manifests hold none
    exported = []
    monkeypatch.setattr(writer, "export_bundle", lambda model, folder, config, progress: exported.append(folder))
    monkeypatch.setattr(bundles, "read_manifest",  # only the fields the check reads
                        lambda folder: SimpleNamespace(**json.loads((folder / "manifest.json").read_text())))
    shipped_sha = load_masks_file(DEFAULT_MASKS).source_sha256
    folder = bundles.default_bundle_dir(None, 1024, bundles.fast_label())  # the default bundle
    _fake_default_bundle(folder, None, shipped_sha)  # exported before the masks shipped
    said = []
    assert bundles.ensure_bundle(None, None, 1024, say=said.append) == folder
    assert exported == [folder] and "predates the learned masks" in said[0]
    _fake_default_bundle(folder, "mtp_masks.npy", shipped_sha)  # what that re-export writes
    assert bundles.ensure_bundle(None, None, 1024, say=said.append) == folder and exported == [folder]  # reused
    _fake_default_bundle(folder, None, "f" * 64)  # default weights the shipped masks were not trained for
    assert bundles.ensure_bundle(None, None, 1024, say=said.append) == folder and exported == [folder]
    other = bundles.default_bundle_dir(str(tmp_path / "other.gguf"), 1024, bundles.fast_label())
    _fake_default_bundle(other, None, shipped_sha)  # another model's bundle never had shipped masks to miss
    assert bundles.ensure_bundle(None, str(tmp_path / "other.gguf"), 1024, say=said.append) == other
    assert exported == [folder]


def test_the_mtp_drafter_gets_the_default_model_with_the_shipped_adapter_in_its_own_folder(tmp_path, monkeypatch):
    """In a -mtp folder of its own, exported once; a cached one made from another adapter (an upgrade shipped a new
    one, or the bundle predates the recorded checkpoint SHA-256) is exported again."""
    import hashlib
    from types import SimpleNamespace

    import mtpedge.bundles as bundles
    import mtpedge.export.bundle_writer as writer
    from mtpedge.export.shipped import DEFAULT_ADAPTER

    monkeypatch.setenv("MTPEDGE_CACHE", str(tmp_path))
    exported = []
    shipped = hashlib.sha256(DEFAULT_ADAPTER.read_bytes()).hexdigest()

    def fake_export(model, folder, config, progress):
        exported.append((model, folder, config.mtp_adapter))
        _fake_default_bundle(folder, "mtp_masks.npy", "0" * 64, shipped)

    monkeypatch.setattr(writer, "export_bundle", fake_export)
    monkeypatch.setattr(bundles, "read_manifest",  # only the fields the check reads
                        lambda folder: SimpleNamespace(**json.loads((folder / "manifest.json").read_text())))
    monkeypatch.setattr(bundles, "_recipe_differs", lambda folder: False)  # the fake manifest records no recipe
    monkeypatch.setattr(bundles, "_other_decode_widths", lambda folder: None)
    monkeypatch.setattr(bundles, "_predates_shipped_table", lambda folder: False)  # the fake manifests hold none
    folder = bundles.ensure_bundle(None, None, 1024, say=lambda _: None, mtp=True)
    fast = bundles.default_bundle_dir(None, 1024, bundles.fast_label())
    assert folder == bundles.default_bundle_dir(None, 1024, f"mtp-{bundles.fast_label()}") != fast
    assert exported == [(None, folder, "default")]
    assert bundles.ensure_bundle(None, None, 1024, say=lambda _: None, mtp=True) == folder and len(exported) == 1
    for older in ("f" * 64, ""):  # another adapter's bundle; one exported before the SHA-256 was recorded
        _fake_default_bundle(folder, "mtp_masks.npy", "0" * 64, older)
        said = []
        assert bundles.ensure_bundle(None, None, 1024, say=said.append, mtp=True) == folder
        assert exported[-1] == (None, folder, "default") and "predates the multi-token adapter" in said[0]
    assert len(exported) == 3
    assert bundles.ensure_bundle("/some/bundle", None, 1024, mtp=True) == Path("/some/bundle")
    with pytest.raises(SystemExit, match="--mtp-adapter ADAPTER.pt"):
        bundles.ensure_bundle(None, str(tmp_path / "other.gguf"), 1024, mtp=True)


def test_mtp_adapter_default_names_the_shipped_file_or_says_how_to_make_one(tmp_path, monkeypatch):
    import mtpedge.export.mtp_export as mtp_export

    assert mtp_export.resolve_adapter("my/adapter.pt") == Path("my/adapter.pt")
    monkeypatch.setattr(mtp_export, "DEFAULT_ADAPTER", tmp_path / "missing.pt")
    with pytest.raises(FileNotFoundError, match="train-mtp"):
        mtp_export.resolve_adapter("default")
    (tmp_path / "missing.pt").write_bytes(b"")
    assert mtp_export.resolve_adapter("default") == tmp_path / "missing.pt"

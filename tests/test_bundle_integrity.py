"""A bundle's files are the ones its export wrote, and stay inside its folder.

Sizes and SHA-256 hashes are recorded at export; loading compares sizes, `mtpedge verify` hashes. A manifest
cannot send the runtime to files elsewhere, even one rewritten (and re-sealed) by whoever tampered with the
bundle: the hashes catch damage, the location checks catch a hostile bundle.
"""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import onnx
import pytest

from mtpedge.main import main
from mtpedge.runtime.bundle import BundleError, Manifest, file_record, read_manifest, write_manifest
from mtpedge.runtime.engine import Engine
from tests.conftest import edit_manifest

GRAPH = "decode_ar1_cl256.onnx"


@pytest.fixture
def folder(tiny_bundle, tmp_path):
    return shutil.copytree(tiny_bundle("llama"), tmp_path / "bundle")


def reseal(folder) -> None:
    """Record the files as they are now, as whoever tampered with them would: sizes and hashes match again."""
    write_manifest(folder, Manifest.from_dict(json.loads((folder / "manifest.json").read_text())))


def test_the_export_records_every_files_size_and_hash(tiny_bundle):
    folder = tiny_bundle("llama")
    manifest = read_manifest(folder)
    on_disk = sorted(p.name for p in folder.iterdir() if p.name != "manifest.json")
    assert sorted(manifest.files) == on_disk and "weights.data" in on_disk and GRAPH in on_disk
    for name, record in manifest.files.items():
        assert record == file_record(folder / name)


def test_verify_passes_an_intact_bundle_and_names_a_changed_file(folder, capsys):
    assert main(["verify", str(folder)]) == 0
    assert f"all {len(read_manifest(folder).files)} files match" in capsys.readouterr().out
    (folder / "cost_table.json").write_text("{}")  # written after the export: listed, not checked
    with open(folder / "weights.data", "r+b") as handle:  # the probe's 4 KB of garbage, same size
        handle.seek(1000)
        handle.write(os.urandom(4096))
    Engine.load(folder)  # the fast size check cannot see it ...
    assert main(["verify", str(folder)]) == 1  # ... the hashes do
    out = capsys.readouterr().out
    assert "CHANGED    weights.data" in out and "1 of" in out and "cost_table.json (not written by the export" in out


def test_a_file_of_the_wrong_size_is_refused_at_load(folder, capsys):
    with open(folder / "weights.data", "r+b") as handle:
        handle.truncate(1000)
    with pytest.raises(BundleError, match="weights.data has 1000 bytes, but its export wrote .*mtpedge verify"):
        Engine.load(folder)
    assert main(["verify", str(folder)]) == 1
    assert "WRONG SIZE weights.data (1000 bytes" in capsys.readouterr().out


def test_a_bundle_from_before_the_hashes_loads_and_verify_says_it_cannot_check(folder, capsys):
    edit_manifest(folder, lambda d: d.pop("files"))
    Engine.load(folder)
    assert main(["verify", str(folder)]) == 1
    assert "exported before mtpedge recorded file hashes" in capsys.readouterr().out


@pytest.mark.parametrize("where", ["graph", "tokenizer", "embeddings", "extras"])
@pytest.mark.parametrize("name", ["{outside}", "../outside/x.onnx", "sub/../../outside/x.onnx"])
def test_a_manifest_cannot_name_files_outside_the_bundle(folder, tmp_path, where, name):
    outside = tmp_path / "outside"
    outside.mkdir()
    shutil.copy(folder / GRAPH, outside / "x.onnx")
    shutil.copy(folder / "weights.data", outside / "weights.data")  # so that the graph would load from there
    name = name.format(outside=outside / "x.onnx")

    def point(data):
        if where == "graph":
            data["graphs"][1]["file"] = name
        elif where == "tokenizer":
            data["tokenizer"]["file"] = name
        elif where == "embeddings":
            data["embeddings_file"] = name
        else:
            data["extras"]["mtp"] = {"masks_file": name}

    edit_manifest(folder, point)
    with pytest.raises(BundleError, match="not a plain name inside the bundle"):
        Engine.load(folder)


def test_provenance_that_names_files_elsewhere_is_not_a_bundle_file(folder):
    # as the default bundle's extras record where the shipped masks were trained
    edit_manifest(folder, lambda d: d["extras"].update(training={"data": {"file": "/home/someone/distill.npz"}}))
    Engine.load(folder)


@pytest.mark.parametrize("name", [GRAPH, "weights.data", "embeddings.npy", "tokenizer.json"])
def test_a_symlink_out_of_the_bundle_is_refused(folder, tmp_path, name):
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    os.replace(folder / name, outside / name)
    os.symlink(outside / name, folder / name)
    reseal(folder)
    with pytest.raises(BundleError, match="out of the bundle"):
        Engine.load(folder)
    assert main(["verify", str(folder)]) == 2


def test_a_symlink_out_of_the_bundle_under_another_name_is_refused(folder, tmp_path):
    (tmp_path / "secret").write_text("not the model's")
    os.symlink(tmp_path / "secret", folder / "notes.txt")  # named by nothing, but refused all the same
    with pytest.raises(BundleError, match="symlink out of the bundle"):
        Engine.load(folder)


def test_a_symlink_within_the_bundle_is_fine(folder):
    os.replace(folder / "embeddings.npy", folder / "table.npy")
    os.symlink("table.npy", folder / "embeddings.npy")
    Engine.load(folder)


def test_graph_weights_located_outside_the_bundle_are_refused(folder, tmp_path):
    """The ONNX file's own external-data location (not the manifest) pointing out: onnxruntime refuses it."""
    shutil.copy(folder / "weights.data", tmp_path / "weights.data")
    model = onnx.load(folder / GRAPH, load_external_data=False)
    for tensor in model.graph.initializer:
        for entry in tensor.external_data:
            if entry.key == "location":
                entry.value = "../weights.data"
    onnx.save(model, folder / GRAPH)
    reseal(folder)
    with pytest.raises(BundleError, match=f"onnxruntime cannot load {GRAPH}"):
        Engine.load(folder)


def test_a_pickled_npy_is_never_unpickled(folder, tmp_path):
    marker = tmp_path / "payload-ran"

    class Payload:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    np.save(folder / "embeddings.npy", np.array([Payload()], dtype=object), allow_pickle=True)
    reseal(folder)
    with pytest.raises((BundleError, ValueError)):
        Engine.load(folder)
    assert not marker.exists()

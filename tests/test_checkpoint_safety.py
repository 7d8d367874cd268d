"""A checkpoint file never runs code: every loader of a user-supplied .pt refuses a pickle that builds objects.

The hostile file here asks the unpickler to call `open(marker, "w")`; with a loader that executes pickles
(torch.load with its weights-only unpickler off, as before this test existed) the marker file appears.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from mtpedge.models.checkpoint import CheckpointError, read_checkpoint, write_checkpoint


class _Payload:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return open, (str(self.marker), "w")


@pytest.fixture
def hostile(tmp_path) -> tuple[Path, Path]:
    marker = tmp_path / "code-ran"
    path = tmp_path / "adapter.pt"
    torch.save({"format": "mtpedge-mtp-adapter", "version": 1, "state": _Payload(marker)}, path)
    return path, marker


def test_read_checkpoint_refuses_objects_without_running_them(hostile):
    path, marker = hostile
    with pytest.raises(CheckpointError, match="could run code"):
        read_checkpoint(path, "MTP adapter", "train one")
    assert not marker.exists()


def test_every_loader_refuses_the_hostile_file(hostile):
    from mtpedge.export.learned_masks import masks_from_checkpoint
    from mtpedge.models.dmtd_train import load_dmtd
    from mtpedge.models.mtp_training import load_checkpoint

    path, marker = hostile
    for load in (load_checkpoint, masks_from_checkpoint, lambda p: load_dmtd(p, None)):
        with pytest.raises(CheckpointError, match=str(path.name)):
            load(path)
    assert not marker.exists()


@pytest.mark.parametrize("argv", [
    ["train-mtp", "--data", "unused.npz", "--resume", "--out", "{path}"],
    ["export", "{model}", "--out", "{out}", "--mtp-adapter", "{path}", "--precision", "float32"],
])
def test_cli_refuses_the_hostile_file_with_a_message(hostile, tiny_model_dir, tmp_path, capsys, argv):
    from mtpedge.main import main

    path, marker = hostile
    argv = [a.format(path=path, model=tiny_model_dir("llama"), out=tmp_path / "bundle") for a in argv]
    assert main(argv) == 2
    assert "could run code" in capsys.readouterr().err
    assert not marker.exists()
    assert not (tmp_path / "bundle").exists()


def test_plain_checkpoints_round_trip(tmp_path):
    payload = {"format": "x", "step": 3, "state": {"w": torch.ones(2)}, "history": [{"loss": 1.5}], "taus": (2, 3)}
    write_checkpoint(payload, tmp_path / "c.pt")
    back = read_checkpoint(tmp_path / "c.pt", "test", "make one")
    assert back["step"] == 3 and torch.equal(back["state"]["w"], torch.ones(2)) and back["taus"] == (2, 3)
    assert [p.name for p in tmp_path.iterdir()] == ["c.pt"]  # no temporary file left behind


def test_shipped_adapter_loads_safely():
    from mtpedge.export.shipped import DEFAULT_ADAPTER
    from mtpedge.models.mtp_training import load_checkpoint

    payload = load_checkpoint(DEFAULT_ADAPTER)
    assert payload["mtp_config"]["k"] >= 1


def test_missing_and_garbage_files_are_named(tmp_path):
    with pytest.raises(CheckpointError, match="does not exist"):
        read_checkpoint(tmp_path / "none.pt", "MTP adapter", "train one")
    garbage = tmp_path / "garbage.pt"
    garbage.write_bytes(b"\x00not a checkpoint" * 10)
    with pytest.raises(CheckpointError, match="garbage.pt"):
        read_checkpoint(garbage, "MTP adapter", "train one")

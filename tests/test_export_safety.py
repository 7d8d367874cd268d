"""An export never leaves debris and fails early: an unwritable place is named before the model loads, SIGTERM
cleans up as Ctrl-C does, hidden work folders of dead runs are removed, and the README's commands parse."""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import mtpedge.export.bundle_writer as writer
from mtpedge.export.bundle_writer import ExportConfig, export_bundle
from mtpedge.export.staging import remove_stale_staging
from mtpedge.export_cmd import add_arguments, export_plan
from mtpedge.main import main

NO_SUCH_PID = 4_194_304 + 123  # above Linux's largest pid_max: never a running process
SMALL = ["--context", "64", "--prefill-width", "8", "--decode-widths", "1"]


@pytest.fixture
def load_never_called(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("the model was loaded before the output folder was checked")

    monkeypatch.setattr(writer, "load_model", refuse)


def test_an_unwritable_cache_is_named_before_the_model_loads(tmp_path, monkeypatch, tiny_model_dir,
                                                             load_never_called, capsys):
    not_a_folder = tmp_path / "cache"
    not_a_folder.write_text("a file where the cache folder should be")  # unwritable even for root
    monkeypatch.setenv("MTPEDGE_CACHE", str(not_a_folder))
    assert main(["generate", "hi", "--model", str(tiny_model_dir("llama"))]) == 2
    err = capsys.readouterr().err
    assert "cannot write the bundle" in err and "MTPEDGE_CACHE" in err
    assert main(["export", str(tiny_model_dir("llama")), "--out", str(not_a_folder / "b"), *SMALL]) == 2
    assert "writable --out" in capsys.readouterr().err


def test_sigterm_during_export_removes_the_work_folder(tmp_path, tiny_model_dir):
    out = tmp_path / "bundle"
    process = subprocess.Popen([sys.executable, "-m", "mtpedge", "export", str(tiny_model_dir("llama")), "--out",
                                str(out), *SMALL], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not list(tmp_path.glob(".bundle.partial-*")) and time.monotonic() < deadline:
            assert process.poll() is None, process.communicate()
            time.sleep(0.05)
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 128 + signal.SIGTERM and "terminated" in err, err[-2000:]
    assert list(tmp_path.iterdir()) == []  # neither the bundle nor its work folder


def test_work_folders_of_dead_runs_are_removed(tmp_path, tiny_model_dir):
    out = tmp_path / "bundle"
    dead = [tmp_path / f".bundle.partial-{NO_SUCH_PID}", tmp_path / f".bundle.old-{NO_SUCH_PID}",
            tmp_path / f".bundle.quantizing-{NO_SUCH_PID}"]
    alive = [tmp_path / f".bundle.partial-{os.getppid()}", tmp_path / f".other.partial-{NO_SUCH_PID}",
             tmp_path / f".bundle.partial-{NO_SUCH_PID}-mine"]  # another run, another bundle, not our pattern
    for folder in dead + alive:
        folder.mkdir()
        (folder / "weights.data").write_bytes(b"x")
    export_bundle(tiny_model_dir("llama"), out, ExportConfig(context=64, prefill_width=8, decode_widths=(1,)))
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["bundle", *(p.name for p in alive)])
    assert remove_stale_staging(out) == []


def readme_commands(pattern: str) -> list[list[str]]:
    readme = (Path(__file__).parents[1] / "README.md").read_text()
    return [line.split("#")[0].split()[1:] for line in readme.splitlines() if re.match(pattern, line)]


def test_the_readme_export_commands_are_valid_without_loading_anything():
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    commands = readme_commands(r"mtpedge export ")
    assert ["export", "--mtp-adapter", "default", "--out", "bundles/smollm2-mtp"] in commands
    for command in commands:
        if "[" not in " ".join(command):  # the synopsis line lists options, not one command
            args = parser.parse_args(command[1:])
            export_plan(args)  # raises where the ExportConfig refuses a combination of options


@pytest.mark.parametrize("options,widths", [
    ([], (1, 2, 4, 16)),  # the fast bundle
    (["--precision", "float32"], (1, 16)),
    (["--precision", "qdq"], (16,)),  # one decode graph: drafting stays lossless on the HTP
    (["--target", "qnn", "--soc", "snapdragon-8-elite"], (16,)),
    (["--precision", "qdq", "--decode-widths", "1,16"], (1, 16)),  # asked for: kept (it then decodes plainly)
])
def test_default_decode_widths_follow_the_precision(options, widths):
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    assert export_plan(parser.parse_args(options))[1].decode_widths == widths

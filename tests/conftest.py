"""Shared fixtures: tiny random LLaMA / Qwen2 / Qwen3 models and their bundles, and the real SmolLM2 bundle.

Tiny bundles are built once per test session (a few seconds each); the SmolLM2 bundle is exported once
into the mtpedge cache (about a minute) and reused by every `slow` test.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

TINY_CONTEXT = 256
TINY_PREFILL = 16
TINY_DECODE_WIDTHS = (1, 8, 32)


def copy_bundle(bundle: Path, tmp_path: Path) -> Path:
    """A copy of `bundle` that a test may damage or edit."""
    return Path(shutil.copytree(bundle, tmp_path / "bundle"))


def edit_manifest(folder: Path, edit: Callable[[dict], None]) -> None:
    """Change a bundle's manifest.json in place (as a careless hand or a tamperer would: no re-sealing)."""
    data = json.loads((folder / "manifest.json").read_text())
    edit(data)
    (folder / "manifest.json").write_text(json.dumps(data))


def set_chat_template(folder: Path, template: str) -> None:
    edit_manifest(folder, lambda manifest: manifest["tokenizer"].update(chat_template=template))


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    """tiny_model_dir(arch) -> a Hugging Face folder with a random tiny model of that architecture."""
    from mtpedge.models.tiny import make_tiny_model

    made: dict[str, Path] = {}

    def make(arch: str = "llama") -> Path:
        if arch not in made:
            made[arch] = make_tiny_model(arch, tmp_path_factory.mktemp(f"tiny_{arch}"))
        return made[arch]

    return make


@pytest.fixture(scope="session")
def tiny_bundle(tiny_model_dir, tmp_path_factory):
    """tiny_bundle(arch) -> a bundle folder exported from the tiny model of that architecture."""
    from mtpedge.export.bundle_writer import ExportConfig, export_bundle

    made: dict[str, Path] = {}

    def make(arch: str = "llama") -> Path:
        if arch not in made:
            out = tmp_path_factory.mktemp(f"bundle_{arch}") / "bundle"
            config = ExportConfig(context=TINY_CONTEXT, prefill_width=TINY_PREFILL, decode_widths=TINY_DECODE_WIDTHS)
            made[arch] = export_bundle(tiny_model_dir(arch), out, config)
        return made[arch]

    return make


@pytest.fixture(scope="session")
def tiny_one_width_bundle(tiny_model_dir, tmp_path_factory) -> Path:
    """The tiny llama with one decode graph (width 4, narrower than its prefill graph): the QDQ / QNN layout."""
    from mtpedge.export.bundle_writer import ExportConfig, export_bundle

    config = ExportConfig(context=TINY_CONTEXT, prefill_width=TINY_PREFILL, decode_widths=(4,))
    return export_bundle(tiny_model_dir("llama"), tmp_path_factory.mktemp("one_width") / "bundle", config)


@pytest.fixture(scope="module")
def bundle(tiny_bundle) -> Path:
    """The tiny LLaMA bundle, for a module that needs one bundle (a module defines its own for another)."""
    return tiny_bundle("llama")


@pytest.fixture(scope="module")
def server(bundle):
    """A live `mtpedge serve` of `bundle` on a loopback port, for the module's tests (tests/server_helpers.py)."""
    from tests.server_helpers import LiveServer

    live = LiveServer(bundle)
    yield live
    live.close()


@pytest.fixture(scope="session")
def smollm2_bundle() -> Path:
    """The embedded default model's default bundle, the fast one that generate/chat/serve/bench use
    (exported into the mtpedge cache on first use)."""
    from mtpedge.bundles import ensure_bundle

    return ensure_bundle(None, None, 1024)


@pytest.fixture(scope="session")
def smollm2_float_bundle() -> Path:
    """The embedded default model's float32 bundle: parity with the PyTorch reference and transformers."""
    from mtpedge.bundles import ensure_bundle

    return ensure_bundle(None, None, 1024, precision="float32")


@pytest.fixture(scope="session")
def smollm2_model():
    from mtpedge.models.loading import load_model

    return load_model(None)

"""Atomic bundle writing: every bundle is built in a hidden folder beside its target and moved into place
only when complete, so an interrupted run leaves no half bundle that looks whole."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from mtpedge.runtime.bundle import Manifest


@contextmanager
def staged_folder(out_dir: Path, tag: str) -> Iterator[Path]:
    """Yield an empty temporary folder; when the block succeeds it replaces `out_dir`, when it fails it is
    deleted (and an older `out_dir` stays as it was)."""
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = out_dir.parent / f".{out_dir.name}.{tag}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    replace_folder(tmp, out_dir)


def replace_folder(tmp: Path, out_dir: Path) -> None:
    """Move a finished bundle into place; an older bundle there is replaced only once the new one is whole."""
    if out_dir.exists():
        old = out_dir.parent / f".{out_dir.name}.old-{os.getpid()}"
        os.replace(out_dir, old)
        os.replace(tmp, out_dir)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(tmp, out_dir)


def copy_host_files(src: Path, manifest: Manifest, dst: Path) -> None:
    """The tokenizer, the embedding table and learned mask embeddings (host-side inputs, whatever the graphs'
    precision), which a derived (quantized, compiled) bundle keeps as they are."""
    names = [manifest.tokenizer.file, manifest.embeddings_file]
    masks = (manifest.extras.get("mtp") or {}).get("masks_file")
    if masks:
        names.append(masks)
    for name in names:
        shutil.copy2(src / name, dst / name)

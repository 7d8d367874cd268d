"""Atomic bundle writing: every bundle is built in a hidden folder beside its target and moved into place
only when complete, so an interrupted run leaves no half bundle that looks whole.

The hidden folders are named `.<bundle>.<tag>-<pid>`. A run killed outright (SIGKILL, a power cut) cannot
remove its own, so the next run writing the same bundle removes those whose process is gone.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from mtpedge.runtime.bundle import BundleError, Manifest, read_manifest
from mtpedge.runtime.static_ngrams import EXTRAS_KEY


def staging_folder(out_dir: Path, tag: str) -> Path:
    """Create the empty hidden folder a bundle for `out_dir` is built in (after clearing stale ones).

    Called before any slow work, so that a place that cannot be written fails at once."""
    tmp = out_dir.parent / f".{out_dir.name}.{tag}-{os.getpid()}"
    try:
        out_dir.parent.mkdir(parents=True, exist_ok=True)
        remove_stale_staging(out_dir)
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
    except OSError as err:
        raise BundleError(f"cannot write the bundle {out_dir} ({err.strerror or err}): pass a writable --out "
                          "(or --bundle an existing one), or point MTPEDGE_CACHE to a writable folder") from err
    return tmp


def remove_stale_staging(out_dir: Path) -> list[Path]:
    """Remove hidden work folders of `out_dir` whose process no longer runs; returns the removed ones."""
    pattern = re.compile(rf"\.{re.escape(out_dir.name)}\.[\w-]+?-(\d+)")
    removed = []
    for path in out_dir.parent.glob(f".{out_dir.name}.*-*"):
        found = pattern.fullmatch(path.name)
        if found and path.is_dir() and not path.is_symlink() and not _running(int(found.group(1))):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


def _running(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


@contextmanager
def staged_folder(out_dir: Path, tag: str) -> Iterator[Path]:
    """Yield an empty temporary folder; when the block succeeds it replaces `out_dir`, when it fails it is
    deleted (and an older `out_dir` stays as it was)."""
    tmp = staging_folder(out_dir, tag)
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


def float_source(src: Path, converter: str, adapter_graphs: bool = False) -> Manifest:
    """The manifest of the float32 bundle a converter (`converter` names it) derives a bundle from; a bundle that
    is already converted, or has adapter graphs the converter does not take (`adapter_graphs`), is refused with
    the fix."""
    manifest = read_manifest(src)
    if manifest.extras.get("mtp", {}).get("adapter_graphs") and not adapter_graphs:
        raise ValueError(f"{src} has MTP adapter graphs (lora_gate input), which {converter} does not handle yet: "
                         "convert the plain bundle instead")
    if any(g.precision != "float32" for g in manifest.graphs):
        raise ValueError(f"{src} is already quantized ({manifest.graphs[0].precision}): {converter} starts from a "
                         "float32 bundle (`mtpedge export --precision float32`)")
    return manifest


def copy_host_files(src: Path, manifest: Manifest, dst: Path) -> None:
    """The tokenizer, the embedding table, learned mask embeddings, an adapter's sampler files and the static n-gram
    table (host-side inputs, whatever the graphs' precision), which a derived (quantized, compiled) bundle keeps as
    they are."""
    names = [manifest.tokenizer.file, manifest.embeddings_file]
    mtp = manifest.extras.get("mtp") or {}
    # learned masks, an adapter's host-side sampler head and its output matrix (when not the embedding table)
    names += [mtp[key] for key in ("masks_file", "sampler_file") if mtp.get(key)]
    if mtp.get("unembedding") not in (None, "embeddings"):
        names.append(mtp["unembedding"])
    if manifest.extras.get(EXTRAS_KEY):  # the static n-gram table of `lookup`
        names.append(manifest.extras[EXTRAS_KEY])
    for name in names:
        shutil.copy2(src / name, dst / name)

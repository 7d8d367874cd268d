"""Where bundles live when the user names none: a cache folder per (model, context), exported on first use."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from mtpedge.runtime.bundle import MANIFEST


def cache_root() -> Path:
    return Path(os.environ.get("MTPEDGE_CACHE", Path.home() / ".cache" / "mtpedge"))


def default_bundle_dir(model: str | None, context: int, precision: str | None = None) -> Path:
    """The cache folder of a model's bundle; `precision` labels a quantized one (None = float32)."""
    if model is None:
        name = "SmolLM2-135M-Instruct"
    else:
        path = Path(model).resolve()
        name = f"{path.stem}-{hashlib.sha1(str(path).encode()).hexdigest()[:8]}"
    suffix = f"-{precision}" if precision else ""
    return cache_root() / "bundles" / f"{name}-cl{context}{suffix}"


def ensure_bundle(bundle: str | None, model: str | None, context: int, say=print) -> Path:
    """The bundle to run: the one named, or the cached export of `model` (None = embedded default)."""
    if bundle:
        return Path(bundle)
    folder = default_bundle_dir(model, context)
    if (folder / MANIFEST).is_file():
        return folder
    try:
        from mtpedge.export.bundle_writer import ExportConfig, export_bundle
    except ImportError as err:
        raise SystemExit(
            f"no bundle at {folder}, and exporting one needs the export extras ({err.name} is missing): "
            "`pip install 'mtpedge[export]'`, or pass --bundle DIR"
        ) from err
    say(f"exporting {'the default model' if model is None else model} to {folder} (once; later runs reuse it)")
    export_bundle(model, folder, ExportConfig(context=context), progress=say)
    return folder

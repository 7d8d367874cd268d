"""Where bundles live when the user names none: a cache folder per (model, context), exported on first use."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from mtpedge.runtime.bundle import MANIFEST, read_manifest

DMTD_DRAFTERS = ("dmtd-spec", "dmtd")  # drafters that run on a DMTD bundle (runtime/drafters/dmtd.py)


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


def ensure_bundle(bundle: str | None, model: str | None, context: int, say=print, mtp: bool = False,
                  dmtd: bool = False) -> Path:
    """The bundle to run: the one named, or the cached export of `model` (None = embedded default).

    mtp: the default model's bundle with the shipped multi-token adapter (a `-mtp` cache folder of its own,
    since adapter graphs make plain decoding slower). dmtd: the default model's DMTD bundle with the shipped DMTD
    model (a `-dmtd` folder: tapped base graphs + the trained copy's graphs)."""
    if bundle:
        return Path(bundle)
    if mtp and dmtd:
        raise SystemExit("mtp and the dmtd drafters run on different bundles: name one family per run, or pass "
                         "--bundle DIR")
    if mtp and model is not None:
        raise SystemExit("the mtp drafter needs a bundle exported with your model's adapter: `mtpedge train-mtp`, "
                         "then `mtpedge export MODEL --mtp-adapter ADAPTER.pt --out DIR`, then --bundle DIR")
    if dmtd and model is not None:
        raise SystemExit("the dmtd drafters need a DMTD bundle of your model: `mtpedge train-dmtd MODEL --data DIR "
                         "--out CKPT --export-bundle DIR`, then --bundle DIR")
    flavor = "mtp" if mtp else "dmtd" if dmtd else None
    folder = default_bundle_dir(model, context, flavor)
    cached = (folder / MANIFEST).is_file()
    if cached and (mtp or (dmtd and not _predates_shipped_dmtd(folder))
                   or (not dmtd and not (model is None and _lacks_shipped_masks(folder)))):
        return folder
    try:
        from mtpedge.export.bundle_writer import ExportConfig, export_bundle
    except ImportError as err:
        if cached:  # a runtime-only install keeps the older bundle rather than failing
            return folder
        raise SystemExit(
            f"no bundle at {folder}, and exporting one needs the export extras ({err.name} is missing): "
            "`pip install 'mtpedge[export]'`, or pass --bundle DIR"
        ) from err
    if cached:  # the atomic export replaces it only once the new one is complete
        shipped = "DMTD model" if dmtd else "learned masks"
        say(f"the cached bundle {folder} predates the {shipped} shipped for the default model: re-exporting it")
    what = "the default model" if model is None else model
    extra = {"mtp": " with its shipped multi-token adapter", "dmtd": " with its shipped DMTD model"}.get(flavor, "")
    say(f"exporting {what}{extra} to {folder} (once; later runs reuse it)")
    if dmtd:
        from mtpedge.export.dmtd_bundle import DmtdExportConfig, export_dmtd_bundle
        from mtpedge.models.loading import load_model

        export_dmtd_bundle(load_model(None), "default", folder, DmtdExportConfig(context=context), progress=say)
    else:
        export_bundle(model, folder, ExportConfig(context=context, mtp_adapter="default" if mtp else None),
                      progress=say)
    return folder


def _predates_shipped_dmtd(folder: Path) -> bool:
    """A -dmtd bundle exported from another DMTD model than the one this installation ships."""
    from mtpedge.export.dmtd_bundle import DEFAULT_DMTD

    if not DEFAULT_DMTD.is_file():
        return False
    recorded = (read_manifest(folder).extras.get("dmtd") or {}).get("checkpoint_sha256")
    return recorded != hashlib.sha256(DEFAULT_DMTD.read_bytes()).hexdigest()


def _lacks_shipped_masks(folder: Path) -> bool:
    """A default-model bundle exported before the project shipped learned masks for those very weights.

    The weights are compared (SHA-256) so that a default model the shipped masks were not trained for, which
    the export would not give them to anyway, is not re-exported on every run.
    """
    from mtpedge.export.learned_masks import default_masks_path, load_masks_file

    shipped = default_masks_path()
    if shipped is None:
        return False
    manifest = read_manifest(folder)
    if (manifest.extras.get("mtp") or {}).get("masks_file"):
        return False
    return load_masks_file(shipped).source_sha256 == manifest.source_sha256


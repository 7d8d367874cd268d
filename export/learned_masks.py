"""Learned mask embeddings as a small portable file, attached to a bundle at export.

A masks file (.npz) holds the k learned mask embeddings of `mtpedge train-mtp --rank 0 --no-sampler`
(k x hidden float32, a few KB) and a JSON header: the format, the base model's source SHA-256 (masks are
only meaningful for the weights they were trained on) and the training provenance. The project ships one
for its embedded default model (`export/data/`), which `mtpedge export` attaches to a default-model bundle
unless told `--masks none`; `--masks FILE` attaches any other. In the bundle they look exactly like the masks
of a masks-only adapter (mtp_masks.npy + extras["mtp"]), so the runtime's `mask_init="learned"` reads them.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

log = logging.getLogger(__name__)

MASKS_FORMAT = "mtpedge-learned-masks"
MASKS_VERSION = 1
MAX_MASKS = 3
BUNDLE_MASKS_FILE = "mtp_masks.npy"  # the name a masks-only adapter export uses (export/mtp_export.py)
# the shipped masks for the embedded default model (SmolLM2-135M-Instruct), see `default_masks_path`
DEFAULT_MASKS = Path(__file__).with_name("data") / "smollm2-135m-instruct-masks.npz"


class MasksFileError(ValueError):
    """A masks file that cannot be used (unreadable, malformed, or made for other weights)."""


@dataclass(frozen=True)
class LearnedMasks:
    masks: np.ndarray  # (k, hidden) float32
    source_sha256: str  # the base weights they were trained on
    model_name: str
    training: dict  # provenance: steps, learning rate, data file, samples, ...

    def __post_init__(self) -> None:
        m = self.masks
        if m.ndim != 2 or not 1 <= m.shape[0] <= MAX_MASKS or m.dtype != np.float32:
            raise MasksFileError(f"learned masks must be a (k, hidden) float32 array with k in 1..{MAX_MASKS}, "
                                 f"got {m.dtype} {m.shape}")
        if not np.isfinite(m).all():
            raise MasksFileError("learned masks contain NaN or infinite values")


def save_masks_file(path: str | Path, learned: LearnedMasks) -> Path:
    """Write `learned` to `path` (.npz), atomically."""
    path = Path(path)
    header = {"format": MASKS_FORMAT, "version": MASKS_VERSION, "source_sha256": learned.source_sha256,
              "model_name": learned.model_name, "training": learned.training}
    tmp = path.with_name(f".{path.stem}.partial-{os.getpid()}.npz")
    np.savez(tmp, masks=learned.masks, header=np.array(json.dumps(header, sort_keys=True)))
    os.replace(tmp, path)
    return path


def load_masks_file(path: str | Path) -> LearnedMasks:
    path = Path(path)
    if not path.is_file():
        raise MasksFileError(f"masks file {path} does not exist (make one from a `mtpedge train-mtp --rank 0 "
                             "--no-sampler` checkpoint with mtpedge.export.learned_masks.masks_from_checkpoint)")
    try:
        with np.load(path, allow_pickle=False) as z:
            masks, header = np.array(z["masks"]), json.loads(str(z["header"]))
    except (OSError, ValueError, KeyError) as err:
        raise MasksFileError(f"{path} is not an mtpedge masks file ({err})") from err
    if header.get("format") != MASKS_FORMAT:
        raise MasksFileError(f"{path} is not an mtpedge masks file (format {header.get('format')!r})")
    if header.get("version") != MASKS_VERSION:
        raise MasksFileError(f"{path}: masks file version {header.get('version')}, this mtpedge reads "
                             f"{MASKS_VERSION}")
    return LearnedMasks(masks, str(header.get("source_sha256", "")), str(header.get("model_name", "")),
                        dict(header.get("training") or {}))


def masks_from_checkpoint(checkpoint: str | Path) -> LearnedMasks:
    """The masks of a masks-only `mtpedge train-mtp` checkpoint (torch needed: it is a .pt file)."""
    from ..models.mtp_training import load_checkpoint

    payload = load_checkpoint(checkpoint)
    config = payload["mtp_config"]
    if config.get("rank") or config.get("sampler"):
        raise MasksFileError(f"{checkpoint} also trained a LoRA or a sampler head, which masks alone would drop: "
                             "export it with `mtpedge export --mtp-adapter` instead")
    base = payload.get("base") or {}
    training = {"steps": payload["step"], "train_config": payload["train_config"], "data": payload.get("data", {})}
    history = payload.get("history") or []
    if history:  # the last 50 steps' mean training loss, for the record
        tail = history[-50:]
        training["final_mask_ce"] = round(float(np.mean([h.get("ce_mask", np.nan) for h in tail])), 4)
    masks = payload["state"]["masks"].detach().numpy().astype(np.float32)
    return LearnedMasks(masks, str(base.get("source_sha256", "")), str(base.get("name", "")), training)


def checked_masks(learned: LearnedMasks, source_sha256: str, hidden: int, origin: str) -> LearnedMasks:
    """`learned` if it was made for these weights (same source SHA-256) and this hidden size; else a clear error."""
    if learned.source_sha256 != source_sha256:
        raise MasksFileError(f"the masks in {origin} were trained on other weights ({learned.model_name or '?'}, "
                             f"sha256 {learned.source_sha256[:12] or 'unknown'}); this model's sha256 is "
                             f"{source_sha256[:12]}: train masks for it with `mtpedge train-mtp --rank 0 "
                             "--no-sampler`, or export with --masks none")
    if learned.masks.shape[1] != hidden:
        raise MasksFileError(f"the masks in {origin} have width {learned.masks.shape[1]}, the model's hidden size "
                             f"is {hidden}")
    return learned


def write_masks_into_bundle(folder: Path, learned: LearnedMasks, origin: str) -> dict:
    """Write mtp_masks.npy into a bundle folder; returns its extras["mtp"] (as a masks-only adapter's)."""
    np.save(folder / BUNDLE_MASKS_FILE, learned.masks)
    log.info("learned masks: k=%d from %s", learned.masks.shape[0], origin)
    return {"k": int(learned.masks.shape[0]), "rank": 0, "sampler": False, "adapter_graphs": False,
            "masks_file": BUNDLE_MASKS_FILE, "masks_origin": origin, "training": learned.training}


def default_masks_path() -> Path | None:
    """The shipped masks file for the embedded default model, if this installation has it."""
    return DEFAULT_MASKS if DEFAULT_MASKS.is_file() else None

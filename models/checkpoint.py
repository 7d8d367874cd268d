"""Checkpoint files (.pt) of the trainers: written atomically, read without ever running code from them.

A `.pt` file is a zip of pickles. `torch.load` with the weights-only unpickler off executes whatever a crafted
file's pickle asks for before any check can look at it, so every loader of a file a user hands us goes through
`read_checkpoint`: torch's restricted unpickler (`weights_only=True`) accepts tensors, numbers, strings and
plain containers only, and anything else is refused with a message that names the file.
"""

from __future__ import annotations

import os
import pickle
from pathlib import Path
from typing import Any

import torch


class CheckpointError(ValueError):
    """A checkpoint file that is missing, corrupt, hostile or of another kind; the message says what to do."""


def shipped_or_path(name: str, shipped: Path, what: str, how_to_make: str) -> Path:
    """`default` names the `shipped` file (a FileNotFoundError saying `how_to_make` one where this installation
    has none); anything else is a checkpoint path."""
    if name != "default":
        return Path(name)
    if not shipped.is_file():
        raise FileNotFoundError(f"this installation has no shipped {what} ({shipped}): {how_to_make}")
    return shipped


def read_checkpoint(path: str | Path, kind: str, make_hint: str) -> dict[str, Any]:
    """The payload dict of a checkpoint; `kind` names what it should be, `make_hint` how to make one."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{kind} checkpoint {path} does not exist: {make_hint}")
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as err:
        # torch's restricted unpickler refused a global: the file asks to build objects, i.e. to run code
        raise CheckpointError(
            f"{path} is not a plain {kind} checkpoint: it asks to build Python objects when loaded "
            f"({str(err).splitlines()[0][:200]}), which could run code, so it was refused unread. "
            f"Use a checkpoint written by mtpedge ({make_hint})"
        ) from err
    except (RuntimeError, OSError, EOFError, ValueError) as err:
        raise CheckpointError(f"{path} is not a readable {kind} checkpoint ({err}): {make_hint}") from err
    if not isinstance(payload, dict):
        raise CheckpointError(f"{path} is not a {kind} checkpoint (it holds a {type(payload).__name__}): {make_hint}")
    return payload


def write_checkpoint(payload: dict[str, Any], path: str | Path) -> None:
    """Save to a hidden temporary file beside `path`, then rename: an interrupted save leaves the old file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.partial-{os.getpid()}")
    try:
        torch.save(payload, tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)

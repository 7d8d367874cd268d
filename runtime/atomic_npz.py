"""An .npz written whole or not at all: a temporary file beside the target, then a rename, so that a reader (or a
resumed job listing finished shards) never sees half a file. The self-distilled data shards and static n-gram tables
are written this way."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import numpy as np


def save_npz(path: str | Path, arrays: dict[str, np.ndarray], compressed: bool = False) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".npz", dir=path.parent)
    os.close(fd)
    try:
        (np.savez_compressed if compressed else np.savez)(tmp, **arrays)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise

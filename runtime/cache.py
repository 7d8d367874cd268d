"""Where mtpedge keeps what it makes once and reuses: bundles, cost tables, row probes, its compiled kernels."""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    """MTPEDGE_CACHE, else ~/.cache/mtpedge."""
    return Path(os.environ.get("MTPEDGE_CACHE", Path.home() / ".cache" / "mtpedge"))

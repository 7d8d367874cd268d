"""Helpers shared by the golden-vector writers (see make_golden.py)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
from mtpedge.runtime.rope import rope_tables

COMMITTED = Path(__file__).resolve().parents[1] / "engine" / "src" / "test" / "resources" / "golden"
log = logging.getLogger("make_golden")
_output = {"folder": COMMITTED}  # where write() puts files; make_golden --out changes it


def set_output(folder: Path) -> None:
    _output["folder"] = Path(folder)


def output() -> Path:
    return _output["folder"]


def f32(values: np.ndarray) -> list:
    """Floats as the shortest decimal that round-trips to the same float32 (Java parses it back exactly)."""
    return [float(str(np.float32(v))) for v in np.asarray(values, dtype=np.float32).ravel()]


def zero_runs(row: np.ndarray) -> list[list[int]]:
    """[start, end) column ranges where an additive bias row is 0 (visible); everything else is the mask value."""
    zero = np.concatenate([[False], row == 0, [False]])
    edges = np.flatnonzero(zero[1:] != zero[:-1])
    return [[int(a), int(b)] for a, b in zip(edges[::2], edges[1::2], strict=True)]


def write(name: str, data: dict) -> None:
    path = output() / name
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, separators=(",", ":"), ensure_ascii=False) + "\n")
    tmp.replace(path)
    log.info("wrote %s (%d KB)", path.name, path.stat().st_size // 1024)


class RopePositions:
    """Recovers the position ids of a graph call from its rope_cos / rope_sin feeds (each row is exactly the
    rope_tables row of one integer position), so the recording does not depend on how the engine builds them."""

    def __init__(self, inv_freq: np.ndarray, limit: int) -> None:
        cos, sin = rope_tables(np.arange(limit), inv_freq)
        self.index = {cos[0, 0, p].tobytes() + sin[0, 0, p].tobytes(): p for p in range(limit)}

    def __call__(self, feeds: dict) -> list[int]:
        cos, sin = feeds["rope_cos"][0, 0], feeds["rope_sin"][0, 0]
        keys = [cos[i].tobytes() + sin[i].tobytes() for i in range(cos.shape[0])]
        missing = [i for i, key in enumerate(keys) if key not in self.index]
        if missing:
            raise ValueError(f"rope rows {missing} are not the tables of any position: the engine's RoPE changed")
        return [self.index[key] for key in keys]

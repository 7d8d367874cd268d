"""Helpers shared by the golden-vector writers (see make_golden.py)."""

from __future__ import annotations

import contextlib
import json
import logging
from pathlib import Path

import mtpedge.runtime.engine as engine_module
import numpy as np

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


@contextlib.contextmanager
def recorded_positions():
    """Record the position ids Engine.run_block computes (it passes them to rope_tables)."""
    seen: list[list[int]] = []
    original = engine_module.rope_tables

    def spy(positions, inv_freq):
        seen.append(np.asarray(positions).tolist())
        return original(positions, inv_freq)

    engine_module.rope_tables = spy
    try:
        yield seen
    finally:
        engine_module.rope_tables = original

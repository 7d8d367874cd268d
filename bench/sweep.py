"""Width sweep: the latency of one graph call at every width a bundle holds (decode and prefill graphs),
next to its roofline estimate. Which widths are nearly free decides how wide a draft tree pays off."""

from __future__ import annotations

import logging
import statistics
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from .roofline import Ceilings, call_cost

log = logging.getLogger(__name__)


def sweep_bundle(folder: str | Path, ceilings: Ceilings, threads: int | None = None, repeats: int = 10,
                 warmup: int = 2, n_past: int | None = None,
                 on_graph: Callable[[str], None] | None = None) -> list[dict]:
    """One record per graph: measured call times (median, min, p90 over `repeats`) and the estimate."""
    from mtpedge.runtime.engine import Engine

    engine = Engine.load(folder, threads=threads)
    config = engine.config
    rng = np.random.default_rng(0)
    records = []
    for entry in sorted(engine.graphs.entries, key=lambda e: (e.width, e.kind)):
        # a half-full cache: the graph reads all C positions whatever n_past is, so this only fixes the mask
        engine.cache.n_past = min(n_past if n_past is not None else engine.context // 2,
                                  engine.context - entry.width)
        embeds = rng.standard_normal((entry.width, config.hidden_size)).astype(np.float32) * 0.02
        chain = np.arange(-1, entry.width - 1)
        for _ in range(warmup):
            engine.run_block(embeds, chain)
        times = [engine.run_block(embeds, chain).seconds for _ in range(repeats)]
        cost = call_cost(config, entry.width, engine.context, entry.precision)
        median = statistics.median(times)
        records.append({
            "graph": entry.name, "kind": entry.kind, "width": entry.width, "precision": entry.precision,
            "context": engine.context, "median_ms": median * 1e3, "min_ms": min(times) * 1e3,
            "p90_ms": float(np.percentile(times, 90)) * 1e3, "ms_per_slot": median * 1e3 / entry.width,
            "repeats": repeats, "gflops": cost.flops / 1e9, "mbytes": cost.bytes / 1e6,
            "intensity_flops_per_byte": cost.intensity, "roofline_ms": ceilings.seconds(cost) * 1e3,
            "bound": ceilings.bound(cost),
            "achieved_gflops_per_s": cost.flops / median / 1e9,
        })
        if on_graph:
            on_graph(entry.name)
    engine.reset()
    return records


def sweep_bundles(folders: Sequence[str | Path], ceilings: Ceilings, **kwargs) -> list[dict]:
    records = []
    for folder in folders:
        for record in sweep_bundle(folder, ceilings, **kwargs):
            records.append({"bundle": str(folder), **record})
    return records

"""Width sweep: the latency of one graph call at every width a bundle holds (decode and prefill graphs),
next to its roofline estimate. Which widths are nearly free decides how wide a draft tree pays off.

Every graph of every bundle is called in turn, round after round, so that machine drift hits all alike: the
ratios between graphs and between bundles (an adapter's graphs vs the plain ones, one precision vs another)
come from interleaved calls in one process.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from .roofline import Ceilings, call_cost

if TYPE_CHECKING:  # the runtime (onnxruntime) loads only when a sweep runs
    from mtpedge.runtime.bundle import GraphEntry
    from mtpedge.runtime.engine import Engine


@dataclass
class _Graph:
    bundle: Path
    engine: Engine
    entry: GraphEntry
    embeds: np.ndarray
    times: list[float]


def sweep_bundles(folders: Sequence[str | Path], ceilings: Ceilings, threads: int | None = None, repeats: int = 10,
                  warmup: int = 2, n_past: int | None = None,
                  on_graph: Callable[[str], None] | None = None) -> list[dict]:
    """One record per graph of every bundle: call times (median, min, p90 over `repeats`) and the estimate."""
    from mtpedge.runtime.engine import Engine

    rng = np.random.default_rng(0)
    graphs = []
    for folder in folders:
        engine = Engine.load(folder, threads=threads)
        for entry in sorted(engine.graphs.entries, key=lambda e: (e.width, e.kind)):
            embeds = rng.standard_normal((entry.width, engine.config.hidden_size)).astype(np.float32) * 0.02
            graphs.append(_Graph(Path(folder), engine, entry, embeds, []))
    for round_index in range(warmup + repeats):
        for graph in graphs:
            engine, width = graph.engine, graph.entry.width
            # a half-full cache: the graph reads all C positions whatever n_past is, so this only fixes the mask
            engine.cache.n_past = min(n_past if n_past is not None else engine.context // 2, engine.context - width)
            seconds = engine.run_block(graph.embeds, np.arange(-1, width - 1)).seconds
            if round_index >= warmup:
                graph.times.append(seconds)
    records = []
    for graph in graphs:
        records.append({"bundle": str(graph.bundle), **_record(graph, ceilings)})
        graph.engine.reset()
        if on_graph:
            on_graph(graph.entry.name)
    return records


def _record(graph: _Graph, ceilings: Ceilings) -> dict:
    entry, engine, times = graph.entry, graph.engine, graph.times
    cost = call_cost(engine.config, entry.width, engine.context, entry.precision)
    median = statistics.median(times)
    return {
        "graph": entry.name, "kind": entry.kind, "width": entry.width, "precision": entry.precision,
        "context": engine.context, "median_ms": median * 1e3, "min_ms": min(times) * 1e3,
        "p90_ms": float(np.percentile(times, 90)) * 1e3, "ms_per_slot": median * 1e3 / entry.width,
        "repeats": len(times), "gflops": cost.flops / 1e9, "mbytes": cost.bytes / 1e6,
        "intensity_flops_per_byte": cost.intensity, "roofline_ms": ceilings.seconds(cost) * 1e3,
        "bound": ceilings.bound(cost), "achieved_gflops_per_s": cost.flops / median / 1e9,
    }

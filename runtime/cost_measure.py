"""A bundle's cost table measured on this machine, once per bundle + machine, and cached.

    table = cost_table_for(engine, cache_dir)              # cached measurement, or a new one (~1-3 s)
    table = cost_table_for(engine, cache_dir, refresh=True)  # measure again

The cache file is keyed by the bundle (SHA-256 of its manifest: another export is another bundle) and by the
machine (CPU model, cores, onnxruntime version, providers, threads): `<cache_dir>/<bundle>-<machine>.json`, in
the file form of `cost_table.CostTable`. A cache folder that cannot be written is not an error: the table is
measured in memory and the caller is told.
"""

from __future__ import annotations

import hashlib
import os
import platform
import statistics
from collections.abc import Callable
from pathlib import Path

import numpy as np

from .bundle import MANIFEST
from .cost_table import CostTable, CostTableError, decode_widths
from .engine import Engine
from .kernels import NATIVE_LABEL

REPEATS = 10
WARMUP = 2
# Graphs on mtpedge's CacheAttention read only the cache columns a row sees, so their calls cost more as the cache
# fills; they are measured at a typical fill (256 positions: a prompt and an answer or two) instead of the full
# context, where attention over all 1024 columns made a width-4 call look 1.93x a width-1 call against 1.42x at 200
# positions, and the sizer stopped drafting wide (benchmarks/results/fast/README.md section 32)
TYPICAL_FILL = 256


def machine_description(engine: Engine) -> str:
    """What a call's cost depends on besides the bundle, in words (the cost table's `device`)."""
    import onnxruntime

    threads = engine.graphs.threads or "default"
    providers = ",".join(p if isinstance(p, str) else p[0] for p in engine.graphs.providers)
    options = ", ".join(f"{k}={v}" for k, v in sorted(engine.graphs.session_options.items()))
    return (f"{_cpu_model()}, {os.cpu_count()} cores, {platform.machine()}, onnxruntime {onnxruntime.__version__} "
            f"{providers}, {threads} threads" + (f" ({options})" if options else ""))


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def cache_file(engine: Engine, cache_dir: Path, suffix: str = ".json") -> Path:
    """Where a measurement of this bundle on this machine is cached (cost tables; `.rows.json`: row_probe.py)."""
    bundle = hashlib.sha256((engine.folder / MANIFEST).read_bytes()).hexdigest()[:16]
    machine = hashlib.sha256(machine_description(engine).encode()).hexdigest()[:12]
    return cache_dir / f"{bundle}-{machine}{suffix}"


def measure_cost_table(engine: Engine, repeats: int = REPEATS, warmup: int = WARMUP) -> CostTable:
    """Median seconds of a call of each decode width at the bundle's full context (chain blocks; a static
    graph on onnxruntime's operators costs the same however full the cache is; smaller context buckets cost
    less, so the table errs on the side of small trees), or at TYPICAL_FILL for graphs on CacheAttention. The
    widths take turns call by call, so that a burst of load on a shared machine slows them all alike instead of
    one width's whole measurement (the ratios decide the trees: one such burst once measured the fast bundle's
    width-4 call at 2.4x a width-1 call instead of ~1.8x, and lookup never drafted). The engine's n_past and
    counters are kept."""
    n_past, calls, seconds = engine.cache.n_past, engine.graph_calls, engine.graph_seconds
    fill = measured_fill(engine)
    blocks = {width: (np.zeros((width, engine.config.hidden_size), np.float32), np.arange(-1, width - 1))
              for width in decode_widths(engine.manifest)}  # chains of zeros
    times: dict[int, list[float]] = {width: [] for width in blocks}
    try:
        for round_ in range(warmup + repeats):
            for width, (embeds, chain) in blocks.items():
                engine.cache.n_past = max(0, fill - width)  # full context: the full-context graphs run
                call_seconds = engine.run_block(embeds, chain).seconds
                if round_ >= warmup:
                    times[width].append(call_seconds)
        measured = {width: statistics.median(t) for width, t in times.items()}
    finally:
        engine.cache.n_past, engine.graph_calls, engine.graph_seconds = n_past, calls, seconds
    m = engine.manifest
    return CostTable(measured, m.model_name, m.source_sha256, m.context, machine_description(engine), "measured")


def measured_fill(engine: Engine) -> int:
    """The cache fill a cost table is measured at: the full context, or TYPICAL_FILL for graphs whose attention
    reads only the filled columns."""
    if any(NATIVE_LABEL in graph.precision for graph in engine.manifest.graphs):
        return min(TYPICAL_FILL, engine.context)
    return engine.context


def cost_table_for(engine: Engine, cache_dir: Path | None, refresh: bool = False,
                   say: Callable[[str], None] = print) -> CostTable:
    """The cached table of this bundle on this machine, or a new measurement (saved when the folder allows)."""
    fill = measured_fill(engine)
    suffix = ".json" if fill == engine.context else f".fill{fill}.json"
    path = cache_file(engine, cache_dir, suffix) if cache_dir is not None else None
    if path is not None and path.is_file() and not refresh:
        try:
            table = CostTable.load(path)
            problem = table.check(engine.manifest)
            if problem is None:
                return table
            say(f"the cached cost table {path} does not fit this bundle ({problem}): measuring again")
        except CostTableError as err:
            say(f"{err}: measuring again")
    table = measure_cost_table(engine)
    if path is not None:
        try:
            table.save(path)
        except OSError as err:
            say(f"cannot save the cost table in {cache_dir} ({err.strerror or err}): measured in memory for this run; "
                "set MTPEDGE_CACHE to a writable folder to keep it")
    return table


COST_MODELS = ("measured", "flat")


def cost_table_from_option(engine: Engine, option: str, cache_dir: Path | None, refresh: bool = False,
                           say: Callable[[str], None] = print) -> CostTable:
    """The table `--cost-model measured|flat|FILE` asks for. A file that cannot be read or belongs to another
    bundle is named, and the table measured here is used instead: decoding never stops for a cost table."""
    manifest = engine.manifest
    if len(decode_widths(manifest)) == 1:
        say(f"the bundle has a single decode width ({decode_widths(manifest)[0]}): draft trees cannot be sized "
            "(they fill that width); export with --decode-widths 1,16 (or more widths) to let them")
    if option == "flat":
        return CostTable.flat(manifest)
    if option == "measured":
        return cost_table_for(engine, cache_dir, refresh, say)
    try:
        table = CostTable.load(option)
        problem = table.check(manifest)
    except CostTableError as err:
        problem = str(err)
    if problem is None:
        return table
    say(f"{problem}: using the cost table measured on this machine instead")
    return cost_table_for(engine, cache_dir, refresh, say)

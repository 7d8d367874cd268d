"""A bundle's cost table measured on this machine, once per bundle + machine, and cached.

    table = cost_table_for(engine, cache_dir)              # cached measurement (checked against a few calls
                                                           # now), or a new one (~1-3 s)
    table = cost_table_for(engine, cache_dir, refresh=True)  # measure again

The cache file is keyed by the bundle (SHA-256 of its manifest: another export is another bundle) and by the
machine (CPU model, cores, onnxruntime version, providers, threads): `<cache_dir>/<bundle>-<machine>.json`, in
the file form of `cost_table.CostTable`. A cached table whose calls run much faster now than it says was
measured under load, and is measured again (`measured_under_load`). A cache folder that cannot be written is not an
error: the table is measured in memory and the caller is told.
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
# A table measured while other jobs ran reads every call slower than a quiet run's, and the trees it sizes are
# shorter though the loop corrects its seconds by the run's own calls: the thirtieth session's first table, measured
# under load ~4, read a width-1 call at 15.7 ms against 8.5 ms quiet, and `lookup` drafted τ 1.64 with it against
# 1.78 with a fresh one (benchmarks/results/fast/README.md section 38). So a cached table whose narrowest call takes
# under STALE_FACTOR of its figure now is measured again: the cache keeps the quieter measurement. A table slower
# than now is kept (the run may be the busy one). The probe costs PROBE_CALLS narrow calls (~25 ms on the default).
STALE_FACTOR = 0.75
PROBE_CALLS = 3


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
    times = _timed_calls(engine, decode_widths(engine.manifest), warmup + repeats)
    measured = {width: statistics.median(t[warmup:]) for width, t in times.items()}
    m = engine.manifest
    return CostTable(measured, m.model_name, m.source_sha256, m.context, machine_description(engine), "measured")


def _timed_calls(engine: Engine, widths: list[int], rounds: int) -> dict[int, list[float]]:
    """Seconds of `rounds` calls of each width on chains of zeros at the measured fill, the widths taking turns.
    The engine's n_past and counters are kept."""
    n_past, calls, seconds = engine.cache.n_past, engine.graph_calls, engine.graph_seconds
    fill = measured_fill(engine)
    blocks = {width: (np.zeros((width, engine.config.hidden_size), np.float32), np.arange(-1, width - 1))
              for width in widths}
    times: dict[int, list[float]] = {width: [] for width in widths}
    try:
        for _ in range(rounds):
            for width, (embeds, chain) in blocks.items():
                engine.cache.n_past = max(0, fill - width)  # full context: the full-context graphs run
                times[width].append(engine.run_block(embeds, chain).seconds)
    finally:
        engine.cache.n_past, engine.graph_calls, engine.graph_seconds = n_past, calls, seconds
    return times


def measured_under_load(engine: Engine, table: CostTable) -> str | None:
    """Why a cached table reads calls slower than they run now (it was measured while the machine was busier), or
    None. Its narrowest call is timed PROBE_CALLS times (their fastest counts: a first call is cold)."""
    narrowest = min(table.seconds)
    now = min(_timed_calls(engine, [narrowest], PROBE_CALLS)[narrowest])
    if now < STALE_FACTOR * table.seconds[narrowest]:
        return (f"it reads a width-{narrowest} call at {table.seconds[narrowest] * 1e3:.2f} ms where one takes "
                f"{now * 1e3:.2f} ms now: it was measured while the machine was busier")
    return None


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
        cached = _read_cached(engine, path, say)
        if cached is not None:
            return cached
    table = measure_cost_table(engine)
    if path is not None:
        try:
            table.save(path)
        except OSError as err:
            say(f"cannot save the cost table in {cache_dir} ({err.strerror or err}): measured in memory for this run; "
                "set MTPEDGE_CACHE to a writable folder to keep it")
    return table


def _read_cached(engine: Engine, path: Path, say: Callable[[str], None]) -> CostTable | None:
    """The table cached at `path` when it is readable, fits the bundle and is not stale; else None, the reason said."""
    try:
        table = CostTable.load(path)
    except CostTableError as err:
        say(f"{err}: measuring again")
        return None
    problem = table.check(engine.manifest)
    if problem is not None:
        say(f"the cached cost table {path} does not fit this bundle ({problem}): measuring again")
        return None
    stale = measured_under_load(engine, table)
    if stale is not None:
        say(f"the cached cost table {path} is stale ({stale}): measuring again")
        return None
    return table


def cost_table_from_option(engine: Engine, option: str, cache_dir: Path | None, refresh: bool = False,
                           say: Callable[[str], None] = print) -> CostTable:
    """The table `--cost-model measured|remeasure|flat|FILE` asks for (remeasure: measured again and cached, as
    refresh=True). A file that cannot be read or belongs to another bundle is named, and the table measured here
    is used instead: decoding never stops for a cost table."""
    refresh = refresh or option == "remeasure"
    manifest = engine.manifest
    if len(decode_widths(manifest)) == 1:
        say(f"the bundle has a single decode width ({decode_widths(manifest)[0]}): draft trees cannot be sized "
            "(they fill that width); export with --decode-widths 1,16 (or more widths) to let them")
    if option == "flat":
        return CostTable.flat(manifest)
    if option in ("measured", "remeasure"):
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

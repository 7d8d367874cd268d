"""Where one decode call spends its time: onnxruntime's per-node profile, summed by kind, and the host side.

For each decode width of each bundle: the wall time of `Engine.run_block` split into the host's part (bias,
RoPE rows, padding, feeds, outputs) and `session.run`; then onnxruntime's own profile of the same calls, the
node time summed by operator kind (weight MatMulNBits, attention MatMul/Softmax over the cache, ...).
Bundles run interleaved call by call, so load noise hits all alike.

    python benchmarks/call_profile.py BUNDLE [BUNDLE ...] [--widths 1,16] [--calls 30] [--threads 2]

Prints a table per width; the last line is one JSON document.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from mtpedge.runtime.engine import Engine  # noqa: E402
from mtpedge.runtime.graphs import native_library  # noqa: E402
from mtpedge.runtime.kernels import NATIVE_LABEL  # noqa: E402


def node_kind(name: str, op: str) -> str:
    """A readable bucket for a profiled node: what part of the decoder it belongs to."""
    if op == "MatMulNBits":
        return "weights: MatMulNBits"
    if op.startswith("BlockMatMul"):
        return "weights: BlockMatMul (mtpedge's kernel, minima included)"
    if op == "MatMul" and ("minima" in name or "offsets" in name):
        return "weights: block-minimum correction"
    if op in ("ReduceSum", "Reshape") and "blocksum" in name:
        return "weights: block-minimum correction"
    if op in ("MatMul", "Gemm"):
        return "MatMul (float: attention / float weights)"
    if op == "Softmax":
        return "attention: Softmax"
    if op == "Concat":
        return "Concat (cache + block keys/values)"
    return f"other: {op}"


def profile_width(folder: Path, width: int, calls: int, threads: int | None, n_past: int) -> dict[str, float]:
    """Milliseconds per call by node kind, from onnxruntime's profiler (a separate session)."""
    engine = Engine.load(folder, threads=threads)
    engine.cache.reserve(n_past + width)  # the context bucket that n_past filled positions use
    engine.cache.n_past = n_past
    entry = engine.graphs.entry_for(width, "decode", context=engine.cache.capacity)
    prefix = Path(tempfile.mkdtemp(prefix="ortprof-")) / "p"
    sess = _profiling_session(engine, entry, str(prefix))
    engine.graphs._sessions[entry.name] = sess
    embeds = np.zeros((width, engine.config.hidden_size), np.float32)
    for _ in range(calls):
        engine.run_block(embeds, np.arange(-1, width - 1))
    trace = json.loads(Path(sess.end_profiling()).read_text())
    totals: dict[str, float] = defaultdict(float)
    runs = 0
    for event in trace:
        if event.get("cat") == "Session" and event.get("name") == "model_run":
            runs += 1
        if event.get("cat") != "Node" or not event.get("name", "").endswith("_kernel_time"):
            continue
        args = event.get("args", {})
        totals[node_kind(event["name"], args.get("op_name", "?"))] += event["dur"] / 1000
    return {kind: ms / max(runs, 1) for kind, ms in sorted(totals.items(), key=lambda kv: -kv[1])}


def _profiling_session(engine: Engine, entry, prefix: str):
    import onnxruntime as ort

    opts = ort.SessionOptions()
    if engine.graphs.threads:
        opts.intra_op_num_threads = engine.graphs.threads
        opts.inter_op_num_threads = 1
    opts.enable_profiling = True
    opts.profile_file_prefix = prefix
    if NATIVE_LABEL in entry.precision:
        opts.register_custom_ops_library(str(native_library()))
    return ort.InferenceSession(str(engine.folder / entry.file), opts, providers=["CPUExecutionProvider"])


def time_calls(folders: list[Path], width: int, calls: int, threads: int | None, n_past: int) -> dict[str, dict]:
    """Wall time of run_block and of session.run inside it, bundles interleaved call by call."""
    engines = {str(f): Engine.load(f, threads=threads) for f in folders}
    walls: dict[str, list[float]] = {k: [] for k in engines}
    runs: dict[str, list[float]] = {k: [] for k in engines}
    for engine in engines.values():
        engine.cache.reserve(n_past + width)  # the context bucket that n_past filled positions use
        engine.cache.n_past = n_past
    hidden = next(iter(engines.values())).config.hidden_size
    embeds = np.zeros((width, hidden), np.float32)
    chain = np.arange(-1, width - 1)
    for i in range(calls + 3):
        for name, engine in engines.items():
            started = time.perf_counter()
            out = engine.run_block(embeds, chain)
            wall = time.perf_counter() - started
            if i >= 3:  # warm-up calls
                walls[name].append(wall)
                runs[name].append(out.seconds)
    # the minimum is the call's cost with the least interference from other jobs on a shared machine
    return {name: {"wall_ms": statistics.median(walls[name]) * 1e3, "min_wall_ms": min(walls[name]) * 1e3,
                   "session_run_ms": statistics.median(runs[name]) * 1e3,
                   "host_ms": statistics.median(np.subtract(walls[name], runs[name])) * 1e3} for name in engines}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bundles", nargs="+", type=Path)
    parser.add_argument("--widths", default="1,16")
    parser.add_argument("--calls", type=int, default=30)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--n-past", type=int, default=100,
                        help="filled cache positions: the mask, and the context bucket a bucketed bundle runs")
    parser.add_argument("--no-profile", action="store_true", help="wall times only")
    args = parser.parse_args(argv)
    widths = [int(w) for w in args.widths.split(",")]
    doc = {"load_average": os.getloadavg(), "threads": args.threads, "calls": args.calls, "widths": {}}
    for width in widths:
        timing = time_calls(args.bundles, width, args.calls, args.threads, args.n_past)
        record = {}
        print(f"\n## width {width}, {args.n_past} positions filled (median of {args.calls} calls, load average "
              f"{os.getloadavg()[0]:.1f})")
        for folder in args.bundles:
            t = timing[str(folder)]
            print(f"{folder}: run_block {t['wall_ms']:.2f} ms (min {t['min_wall_ms']:.2f}) = session.run "
                  f"{t['session_run_ms']:.2f} + host {t['host_ms']:.2f}")
            record[str(folder)] = {"timing": t}
            if not args.no_profile:
                kinds = profile_width(folder, width, args.calls, args.threads, args.n_past)
                total = sum(kinds.values())
                for kind, ms in kinds.items():
                    print(f"    {kind:<45} {ms:7.2f} ms  {ms / total:6.1%}")
                print(f"    {'sum of node times':<45} {total:7.2f} ms")
                record[str(folder)]["nodes_ms"] = kinds
        doc["widths"][str(width)] = record
    print(json.dumps(doc))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""One copy of the weights for every graph width: context-binary sizes with and without QNN weight sharing.

    python benchmarks/qnn_weight_sharing.py QDQ_BUNDLE --soc snapdragon-8-elite --work DIR [--out FILE.json]

Compiles the QDQ bundle twice with `compile_qnn_bundle`: one context binary per graph (each with its own
weights), and one shared context whose graphs share one copy. While the shared context is compiled, every
graph runs once in its compile session on the HTP simulator (CPU fallback disabled: the session exists
only if the whole graph is on the HTP), fed a real prompt, and its logits are compared with the CPU QDQ
graph's (correlation, top-1 per row). The finished shared binary is not loaded back: the x86 simulator
cannot (runtime/qnn.py).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from mtpedge.bench.report import emit_result  # noqa: E402
from mtpedge.export.qnn_compile import compile_qnn_bundle  # noqa: E402
from mtpedge.runtime.bundle import read_manifest  # noqa: E402
from mtpedge.runtime.engine import Engine  # noqa: E402

PROMPT = "Explain in two sentences why the sky is blue."


def prompt_feeds(bundle: Path) -> dict[str, dict[str, np.ndarray]]:
    """Each graph's feeds for the first `width` tokens of a chat prompt, from an empty cache."""
    engine = Engine.load(bundle)
    ids = engine.tokenizer.encode_chat([{"role": "user", "content": PROMPT}])
    feeds = {}
    original = engine.graphs.run

    def record(entry, call_feeds, n_real):
        feeds[entry.name] = {k: v.copy() for k, v in call_feeds.items()}
        return original(entry, call_feeds, n_real)

    engine.graphs.run = record
    for entry in engine.graphs.entries:
        engine.reset()
        part = np.asarray((ids * entry.width)[:entry.width])
        engine.run_block(engine.embed(part), np.arange(-1, part.size - 1))
    return feeds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bundle")
    parser.add_argument("--soc", default="snapdragon-8-elite")
    parser.add_argument("--work", required=True, help="folder for the two compiled bundles")
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    bundle, work = Path(args.bundle), Path(args.work)
    manifest = read_manifest(bundle)
    feeds = prompt_feeds(bundle)
    checks = []

    def run_in_context(i: int, session: ort.InferenceSession) -> None:
        entry = manifest.graphs[i]
        started = time.perf_counter()
        htp = session.run(["logits"], feeds[entry.name])[0][0]
        seconds = time.perf_counter() - started
        cpu = ort.InferenceSession(str(bundle / entry.file), providers=["CPUExecutionProvider"])
        ref = cpu.run(["logits"], feeds[entry.name])[0][0]
        checks.append({"graph": entry.name, "width": entry.width, "simulator_s": round(seconds, 2),
                       "logit_correlation": round(float(np.corrcoef(htp.ravel(), ref.ravel())[0, 1]), 5),
                       "top1_rows_equal": int((htp.argmax(-1) == ref.argmax(-1)).sum()), "rows": entry.width})
        print(f"  {checks[-1]}", file=sys.stderr, flush=True)

    started = time.perf_counter()
    shared = read_manifest(compile_qnn_bundle(bundle, work / "shared", args.soc, share_weights=True,
                                              on_compiled=run_in_context, progress=print))
    separate = read_manifest(compile_qnn_bundle(bundle, work / "separate", args.soc, share_weights=False,
                                                progress=print))
    sizes = {name: {b: (work / name / b).stat().st_size for b in m.extras["qnn"]["context_binaries"]}
             for name, m in (("shared", shared), ("separate", separate))}
    report = {"bundle": str(bundle), "soc": args.soc, "graphs": [g.name for g in manifest.graphs],
              "qdq_weights_bytes": (bundle / "weights.data").stat().st_size,
              "separate_binaries": sizes["separate"], "separate_bytes": sum(sizes["separate"].values()),
              "shared_binaries": sizes["shared"], "shared_bytes": sum(sizes["shared"].values()),
              "graphs_run_in_shared_context": checks, "load_average": os.getloadavg()[0],
              "seconds": round(time.perf_counter() - started, 1)}
    emit_result(report, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())

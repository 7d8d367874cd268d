"""Does a bundle compute a drafted chain's rows bit for bit as plain decoding does, on this machine or the HTP?

    python benchmarks/row_probe.py BUNDLE [--device cpu|qnn] [--threads 1] [--out FILE.json]

runtime/row_probe.py's probe, uncached, with its time: a prefix of 24 tokens, then a chain through every decode
graph wider than 1 against plain decoding's calls (the narrowest decode graph, one token each), logits and every
layer's new keys compared. On a QNN bundle (`compile-qnn --no-share-weights`) it runs on the HTP simulator with
CPU fallback disabled: seconds a call, the widest decode width + 2 calls. With one decode graph, plain decoding
runs that graph too, and the probe asks whether a row depends on its slot or on the other slots' tokens.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from mtpedge.bench.report import emit_result
from mtpedge.runtime.engine import Engine
from mtpedge.runtime.qnn import QNN_EP
from mtpedge.runtime.row_probe import probe_rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bundle")
    parser.add_argument("--device", choices=["cpu", "qnn"], default="cpu")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", help="write the result JSON here too")
    args = parser.parse_args(argv)
    engine = Engine.load(args.bundle, threads=args.threads, providers=[QNN_EP] if args.device == "qnn" else None)
    started = time.perf_counter()
    probe = probe_rows(engine)
    emit_result({"bundle": os.path.abspath(args.bundle), "device": probe.device,
                 "decode_graphs": sorted({(g.width, g.context) for g in engine.manifest.graphs if g.kind == "decode"}),
                 "max_diff": {str(w): d for w, d in probe.max_diff.items()}, "invariant": probe.invariant,
                 "seconds": round(time.perf_counter() - started, 1), "load_average": os.getloadavg()[0]}, args.out)
    return 0 if probe.invariant else 1


if __name__ == "__main__":
    sys.exit(main())

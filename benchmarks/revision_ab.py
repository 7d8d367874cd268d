"""One bundle under the mtpedge on the import path: graph calls per width and plain decoding, one JSON line.

Run it alternately under two revisions of mtpedge (each with its own bundle), e.g. the graph contract before and
after a change, to compare revisions that cannot share a process:

    PYTHONPATH=/tmp/v1pkg python benchmarks/revision_ab.py BUNDLE_V1 --label v1   # /tmp/v1pkg/mtpedge -> old checkout
    python benchmarks/revision_ab.py BUNDLE_V2 --label v2

calls: median ms of one call of each decode width from a cache of --past positions; decoding: plain greedy tokens/s
over the tuning prompts (benchmarks/lean_calls.py), --max-new-tokens each, and the host's ms per decode call (the
decode time outside graph calls). The load average is recorded.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from lean_calls import tuning_questions  # noqa: E402

from mtpedge.runtime.engine import Engine  # noqa: E402
from mtpedge.runtime.generate import generate  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bundle")
    parser.add_argument("--label", default="")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--past", type=int, default=100)
    parser.add_argument("--prompts", type=int, default=3)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    args = parser.parse_args()
    engine = Engine.load(args.bundle, threads=args.threads)
    widths = sorted({g.width for g in engine.manifest.graphs if g.kind == "decode"})
    calls = {}
    for width in widths:
        times = []
        for _ in range(args.calls + 2):
            engine.reset()
            engine.cache.n_past = args.past
            times.append(engine.run_block(engine.embed(np.arange(width)), np.arange(-1, width - 1)).seconds * 1e3)
        calls[f"w{width}_ms"] = round(statistics.median(times[2:]), 2)
    tokens = seconds = host = decode_calls = 0.0
    for question in tuning_questions()[: args.prompts]:
        prompt = engine.tokenizer.encode_chat([{"role": "user", "content": question.turns[0]}])
        result = generate(engine, prompt, max_new_tokens=args.max_new_tokens, stop_token_ids=set())
        stats = result.stats
        tokens += stats.new_tokens
        seconds += stats.elapsed_seconds
        host += stats.decode_seconds - stats.decode_graph_seconds
        decode_calls += stats.decode_calls
    print(json.dumps({"label": args.label, "engine": sys.modules[Engine.__module__].__file__, **calls,
                      "plain_tokens_per_s": round(tokens / seconds, 2),
                      "host_ms_per_decode_call": round(1e3 * host / decode_calls, 3), "load": os.getloadavg()[0]}))


if __name__ == "__main__":
    main()

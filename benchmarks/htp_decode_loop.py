"""The decode loop on the HTP: `mtpedge generate` with a drafter vs plain decoding, same QNN graphs.

    python benchmarks/htp_decode_loop.py QNN_BUNDLE [--drafter lookup] [--prompts 3] [--tokens 16]
        [--calls 3] [--out FILE.json]

QNN_BUNDLE is a `mtpedge compile-qnn --no-share-weights` bundle (one context binary per graph: the form the
x86 HTP simulator loads). For each prompt, `mtpedge generate --device qnn --json` runs once plainly and
once with the drafter (default: runtime.drafters.DEFAULT_DRAFTER, with the flat cost table generate gives the
simulator), each in its own process (the simulator misbehaves with many HTP sessions alive in
one process), and their token ids are compared. With decode graphs of several widths, equal tokens say only
that drafting kept plain decoding's answer on these prompts: the HTP computes a root row otherwise at another
width (benchmarks/width_invariance.py --device qnn). With one decode graph (the default of `export --precision
qdq`) plain decoding runs the drafts' graph, and the run checks what holds by construction there
(runtime.drafters.default_drafter; benchmarks/row_probe.py). Then each graph width is called `--calls` times
from one engine to record what a call costs there.

The simulator is a functional model of the HTP, not a timing model: its seconds say how long the x86
simulation took, not how long the phone's NPU would. The device's own per-width costs come from
`mtpedge hub profile` (runtime/cost_table.py).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

from mtpedge.bench.report import emit_result
from mtpedge.runtime.drafters import DEFAULT_DRAFTER

PROMPTS = (
    "Explain how a bicycle works, step by step.",
    "Write a short story about a lighthouse keeper and a storm.",
    "List the planets of the solar system and one fact about each.",
    "Describe how to make a cup of tea.",
    "What are the benefits of regular exercise?",
)


def generate_json(bundle: str, prompt: str, tokens: int, drafter: str) -> dict:
    """One `mtpedge generate --device qnn --json` run in a fresh process."""
    command = [sys.executable, "-m", "mtpedge", "generate", prompt, "--bundle", bundle, "--device", "qnn",
               "--json", "--max-new-tokens", str(tokens), "--drafter", drafter, "--threads", "1"]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"`{' '.join(command)}` failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def width_costs(bundle: str, calls: int) -> dict[str, dict]:
    """Median and all seconds of `calls` calls of each graph width on the simulator (one engine)."""
    from mtpedge.runtime.engine import Engine
    from mtpedge.runtime.qnn import QNN_EP

    engine = Engine.load(bundle, threads=1, providers=[QNN_EP])
    costs = {}
    for entry in engine.graphs.entries:
        seconds = []
        for _ in range(calls):
            engine.reset()
            tokens = np.arange(1, entry.width + 1)
            out = engine.run_block(engine.embed(tokens), np.arange(-1, entry.width - 1))
            seconds.append(round(out.seconds, 3))
        costs[str(entry.width)] = {"graph": entry.name, "median_s": float(np.median(seconds)), "seconds": seconds}
        print(f"  width {entry.width}: {np.median(seconds):.2f} s per call on the simulator", file=sys.stderr)
    return costs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bundle")
    parser.add_argument("--drafter", default=DEFAULT_DRAFTER, help=f"default {DEFAULT_DRAFTER}")
    parser.add_argument("--prompts", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=16)
    parser.add_argument("--calls", type=int, default=3, help="timed calls per graph width")
    parser.add_argument("--out", help="write the results JSON here too")
    args = parser.parse_args(argv)
    if not 1 <= args.prompts <= len(PROMPTS):
        parser.error(f"--prompts must be between 1 and {len(PROMPTS)}")
    started = time.perf_counter()
    runs = []
    for prompt in PROMPTS[:args.prompts]:
        plain = generate_json(args.bundle, prompt, args.tokens, "none")
        drafted = generate_json(args.bundle, prompt, args.tokens, args.drafter)
        same = plain["token_ids"] == drafted["token_ids"]
        runs.append({"prompt": prompt, "identical": same, "plain_tokens": plain["token_ids"],
                     "drafter_tokens": drafted["token_ids"], "text": plain["text"],
                     "plain_calls": plain["forward_calls"], "drafter_calls": drafted["forward_calls"],
                     "drafter_tokens_per_call": drafted["tokens_per_call"],
                     "plain_graph_s": plain["graph_s"], "drafter_graph_s": drafted["graph_s"]})
        print(f"{'SAME' if same else 'DIFFERENT'}: {len(plain['token_ids'])} tokens, plain {plain['forward_calls']} "
              f"calls, {args.drafter} {drafted['forward_calls']} calls (τ {drafted['tokens_per_call']:.2f}): "
              f"{plain['text'][:60]!r}", file=sys.stderr, flush=True)
    report = {
        "bundle": os.path.abspath(args.bundle), "drafter": args.drafter, "tokens": args.tokens,
        "identical": sum(r["identical"] for r in runs), "prompts": len(runs), "runs": runs,
        "simulator_seconds_per_call": width_costs(args.bundle, args.calls),
        "note": "HTP simulator on x86: a functional model, its seconds are not device latency",
        "load_average": os.getloadavg()[0], "seconds": round(time.perf_counter() - started, 1),
    }
    emit_result(report, args.out)
    return 0 if report["identical"] == report["prompts"] else 1


if __name__ == "__main__":
    sys.exit(main())

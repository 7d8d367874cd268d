"""mtpedge distill --out FILE [--bundle DIR] [--prompts N] [--max-new-tokens N]: self-distilled training data."""

from __future__ import annotations

import argparse
import sys
import time

from mtpedge.bundles import ensure_bundle


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", required=True, help=".npz file to write (resumed if it exists)")
    parser.add_argument("--bundle", help="bundle folder (default: the default model's float32 export)")
    parser.add_argument("--model", help="GGUF file or Hugging Face folder to export when no --bundle is given")
    parser.add_argument("--context", type=int, default=1024, help="context of an automatic export (default 1024)")
    parser.add_argument("--prompts", type=int, default=160, help="how many of the project's prompts to answer")
    parser.add_argument("--max-new-tokens", type=int, default=160, help="answer length cap (greedy)")
    parser.add_argument("--threads", type=int, default=None, help="onnxruntime intra-op threads")


def run(args: argparse.Namespace) -> int:
    from mtpedge.models.distill_data import build_distill_file, prompt_set
    from mtpedge.runtime.engine import Engine

    # the float32 graphs: the answers are training targets for adapters trained on the float weights
    engine = Engine.load(ensure_bundle(args.bundle, args.model, args.context, precision="float32"),
                         threads=args.threads)
    prompts = prompt_set(args.prompts)
    started = time.perf_counter()

    def progress(done: int, total: int, tokens: int) -> None:
        rate = tokens / max(time.perf_counter() - started, 1e-9)
        print(f"\r{done}/{total} prompts, {tokens} response tokens ({rate:.1f} tok/s)", end="", file=sys.stderr,
              flush=True)

    count = build_distill_file(engine, prompts, args.max_new_tokens, args.out, progress=progress)
    print(f"\n{count} samples in {args.out}", file=sys.stderr)
    return 0

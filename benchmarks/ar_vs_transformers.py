"""Plain greedy decoding: mtpedge's runtime (static ONNX graphs, host KV cache) vs transformers `generate`.

Same model (the embedded SmolLM2 by default), same prompts, same thread count, runs interleaved per prompt
so machine noise hits both alike. Decode speed excludes the prompt (tokens after the first / time after
prefill). Prints a table; the last line is one JSON document.

    python benchmarks/ar_vs_transformers.py [--bundle DIR] [--prompts 8] [--max-new-tokens 64] [--threads 2]
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from mtpedge.bundles import ensure_bundle  # noqa: E402
from mtpedge.models.loading import default_model_path  # noqa: E402
from mtpedge.runtime.engine import Engine  # noqa: E402
from mtpedge.runtime.generate import generate  # noqa: E402
from tests.spec_bench import questions  # noqa: E402


class FirstTokenClock:
    """A transformers streamer that notes when the first new token arrives (the end of prefill)."""

    def __init__(self):
        self.calls = 0
        self.first_token_at = None

    def put(self, value):
        self.calls += 1
        if self.calls == 2:  # the first put is the prompt
            self.first_token_at = time.perf_counter()

    def end(self):
        pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bundle")
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()

    from transformers import AutoModelForCausalLM

    torch.set_num_threads(args.threads)
    engine = Engine.load(ensure_bundle(args.bundle, None, 1024, precision="float32"), threads=args.threads)
    model_path = default_model_path()
    hf = AutoModelForCausalLM.from_pretrained(model_path.parent, gguf_file=model_path.name,
                                              dtype=torch.float32).eval()
    hf.generation_config.eos_token_id = None  # both run the full n tokens, through any end-of-turn token
    prompts = [q["turns"][0] for q in questions(per_category=2, max_chars=400)][: args.prompts]
    n = args.max_new_tokens
    rows = []
    for i, prompt in enumerate(prompts, 1):
        ids = engine.tokenizer.encode_chat([{"role": "user", "content": prompt}])
        ours = generate(engine, ids, n, stop_token_ids=set())
        streamer = FirstTokenClock()
        with torch.no_grad():
            out = hf.generate(torch.tensor([ids]), max_new_tokens=n, do_sample=False,
                              streamer=streamer, pad_token_id=0)
        ended = time.perf_counter()
        theirs = out[0, len(ids):].tolist()
        hf_tps = (n - 1) / (ended - streamer.first_token_at)
        rows.append({"prompt_tokens": len(ids), "ours_tps": ours.stats.tokens_per_second, "hf_tps": hf_tps,
                     "same_tokens": ours.token_ids == theirs,
                     "ours_graph_share": ours.stats.graph_seconds / ours.stats.elapsed_seconds})
        print(f"[{i}/{len(prompts)}] prompt {len(ids):4d} tok  mtpedge {rows[-1]['ours_tps']:6.1f} tok/s  "
              f"transformers {hf_tps:6.1f} tok/s  same output: {rows[-1]['same_tokens']}", flush=True)
    ours_tps = float(np.mean([r["ours_tps"] for r in rows]))
    hf_tps = float(np.mean([r["hf_tps"] for r in rows]))
    print(f"\n| decoder | tok/s (mean of {len(rows)} prompts, {n} new tokens, {args.threads} threads) |")
    print("|---|---|")
    print(f"| mtpedge runtime, float32 ONNX (decode_ar1) | {ours_tps:.1f} |")
    print(f"| transformers generate, float32 | {hf_tps:.1f} |")
    print(f"| ratio | {ours_tps / hf_tps:.2f}x |")
    print(json.dumps({"benchmark": "ar_vs_transformers", "machine": platform.processor() or platform.machine(),
                      "threads": args.threads, "max_new_tokens": n, "mtpedge_tps": ours_tps,
                      "transformers_tps": hf_tps, "ratio": ours_tps / hf_tps,
                      "identical_outputs": sum(r["same_tokens"] for r in rows), "prompts": len(rows),
                      "rows": rows}))


if __name__ == "__main__":
    main()

"""mtpedge distill --out DIR [--model M] [--device auto] [--batch 32] [--exclude-questions question.jsonl]

Self-distilled training data at scale: the base model's own answers (greedy, and a seeded sampled share) to
~6,900 prompts of the project's catalogue, self-made questions and second turns, each response token with
the teacher's top-k distribution, generated in batches with a KV cache (PyTorch; CUDA when present). The
folder's shards are written atomically: run the same command again to resume. Trainers take the folder as
--data. Plan and stages: `mtpedge.models.distill_run`.
"""

from __future__ import annotations

import argparse
import sys
import time

from mtpedge.bench.questions import SPEC_BENCH


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", required=True, help="data folder (resumed if it exists)")
    parser.add_argument("--model", help="GGUF file or Hugging Face folder (default: the embedded SmolLM2-135M)")
    parser.add_argument("--device", default="auto", help="auto (CUDA when present, else CPU), cpu or cuda")
    parser.add_argument("--threads", type=int, default=1, help="torch threads on the CPU (default 1)")
    parser.add_argument("--batch", type=int, default=32, help="answers decoded together (default 32)")
    parser.add_argument("--max-new-tokens", type=int, default=256, help="answer length cap (default 256)")
    parser.add_argument("--top-k", type=int, default=32, help="teacher distribution entries kept per token")
    parser.add_argument("--shard-size", type=int, default=256, help="conversations per shard file (default 256)")
    parser.add_argument("--scale", type=float, default=1.0,
                        help="multiply every prompt count of the plan (e.g. 0.02 for a smoke run)")
    parser.add_argument("--time-limit", type=float, default=0.0, metavar="SECONDS",
                        help="start no new shard after this many seconds (the folder resumes; default 0: none)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the plan (shuffles, sampled share, math)")
    parser.add_argument("--exclude-questions", default=str(SPEC_BENCH),
                        help="question.jsonl whose turns no prompt may repeat or share 8 words with (default: the "
                             "shipped Spec-Bench file, so the benchmark never scores answers trained on; '' = none)")


def run(args: argparse.Namespace) -> int:
    import torch

    from mtpedge.bench.questions import all_turns
    from mtpedge.models.device import resolve_device
    from mtpedge.models.distill_batch import GenerationConfig
    from mtpedge.models.distill_prompts import SpecBenchFilter
    from mtpedge.models.distill_run import DistillPlan, DistillRun
    from mtpedge.models.loading import load_model

    device = resolve_device(args.device)
    torch.set_num_threads(args.threads)
    spec_filter = SpecBenchFilter(all_turns(args.exclude_questions)) if args.exclude_questions else None
    plan = DistillPlan(seed=args.seed)
    if args.scale != 1.0:
        plan = plan.scaled(args.scale)
    generation = GenerationConfig(max_new_tokens=args.max_new_tokens, batch=args.batch, top_k=args.top_k)
    loaded = load_model(args.model)
    loaded.decoder.to(device)
    started = time.perf_counter()

    def say(line: str) -> None:
        print(f"[{time.perf_counter() - started:7.0f} s] {line}", file=sys.stderr, flush=True)

    say(f"{loaded.name} on {device}, {args.threads} thread(s); batch {args.batch}, <= {args.max_new_tokens} new "
        f"tokens, top-{args.top_k}; ~{plan.expected_conversations} conversations into {args.out}")
    run = DistillRun(args.out, plan, generation, args.shard_size, loaded, spec_filter, str(device), say)
    written = run.run(time_limit=args.time_limit)
    say(f"{'done' if run.complete else 'stopped'}: {written} shards written by this run; {run.progress.answers} "
        f"answers, {run.progress.tokens:,} response tokens in {args.out}")
    return 0

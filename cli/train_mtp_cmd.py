"""mtpedge train-mtp --data DISTILL --out ADAPTER.pt [--k 3 --rank 16 --steps 300 ...] [--resume]

Trains the multi-token adapter (learned masks, gated LoRA, sampler head; methods.md section 2) on
self-distilled data (`mtpedge distill`: a folder of shards, or an .npz). `--rank 0 --no-sampler` trains
learned mask embeddings alone; `--lcm-weight 0` drops the consistency loss; `--sampler-form paper` trains the
paper's head; `--teacher-weight w` distils from the stored teacher top-k. With --heldout-questions (Spec-Bench's
question.jsonl) held-out τ is measured every --eval-every steps on questions 5-6 of each category
(models/mtp_eval.py). The checkpoint is rewritten every --checkpoint-every steps; --resume continues it up to
--steps, or for --time-limit seconds (the same command fits a GPU lent for minutes or a CPU for hours). Then
`mtpedge export --mtp-adapter ADAPTER.pt` (see export_mtp) writes a bundle with the adapter.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data", required=True, help="distillation data: a `mtpedge distill` folder or an .npz")
    parser.add_argument("--out", required=True, help="adapter checkpoint to write (.pt)")
    parser.add_argument("--model", default=None, help="GGUF file or Hugging Face folder (default: SmolLM2-135M)")
    parser.add_argument("--k", type=int, default=3, help="mask slots = drafts per step (default 3)")
    parser.add_argument("--rank", type=int, default=16, help="gated LoRA rank; 0 = no LoRA (default 16)")
    parser.add_argument("--alpha", type=float, default=32.0, help="LoRA scale numerator (scale = alpha / rank)")
    parser.add_argument("--no-sampler", action="store_true", help="train no sampler head")
    parser.add_argument("--sampler-form", default="residual", choices=("residual", "paper"),
                        help="the sampler head: residual (default) or the paper's two blocks (both export)")
    parser.add_argument("--teacher-weight", type=float, default=0.0,
                        help="share of each CE taken against the data's teacher top-k (0: hard labels; default 0)")
    parser.add_argument("--steps", type=int, default=300, help="total optimisation steps (one sample each)")
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--cosine-steps", type=int, default=0,
                        help="decay the learning rate along a cosine to 10%% at this step (default 0: constant)")
    parser.add_argument("--time-limit", type=float, default=0.0, metavar="SECONDS",
                        help="stop after this many seconds of training (evaluations and earlier sessions of a resumed "
                             "run included), with the cosine laid over them instead of --cosine-steps; --steps "
                             "stays the upper bound (default 0: none)")
    parser.add_argument("--max-seq-len", type=int, default=256, help="tokens per sample (prompt cut from the left)")
    parser.add_argument("--max-blocks", type=int, default=48, help="mask blocks (owner tokens) per step")
    parser.add_argument("--lcm-weight", type=float, default=1.0, help="weight of the latent consistency loss")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--checkpoint-every", type=int, default=25)
    parser.add_argument("--resume", action="store_true", help="continue the checkpoint at --out")
    parser.add_argument("--init", metavar="FILE|default",
                        help="start from a trained adapter's weights (a checkpoint, a release copy, or `default`: "
                             "the shipped one) with a fresh optimizer: fine-tuning on new data")
    parser.add_argument("--curve", default=None, help="write the loss curve (JSON) here too")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    parser.add_argument("--device", default="auto", help="auto (CUDA when present, else CPU), cpu or cuda")
    parser.add_argument("--precision", default="float32", choices=("float32", "bfloat16"),
                        help="of the forward passes: float32 (default) or bfloat16 (matrix products in bfloat16 on AMX "
                             "CPUs and GPUs; weights, gradients and losses stay float32)")
    parser.add_argument("--heldout-questions", help="Spec-Bench question.jsonl: measure held-out τ during training")
    parser.add_argument("--eval-every", type=int, default=200, help="steps between held-out evaluations")
    parser.add_argument("--eval-tokens", type=int, default=128, help="answer tokens per held-out question")
    parser.add_argument("--eval-candidates", default="64,0",
                        help="sampler shortlists to evaluate (top-c of the plain mask logits; 0 = all)")
    parser.add_argument("--release-copy", default=None,
                        help="also write an export-only copy here (float16, no optimizer state: ~4x smaller)")


def run(args: argparse.Namespace) -> int:
    import torch

    from mtpedge.models.device import resolve_device
    from mtpedge.models.distill_data import load_distill_data
    from mtpedge.models.loading import load_model
    from mtpedge.models.mtp_training import load_checkpoint, train, write_curve, write_release_copy

    device = resolve_device(args.device)
    torch.set_num_threads(args.threads)
    out = Path(args.out)
    resume = load_checkpoint(out) if args.resume else None
    if not args.resume and out.exists():
        raise ValueError(f"{out} exists: pass --resume to continue it, or choose another --out")
    samples = load_distill_data(args.data)
    loaded = load_model(args.model)
    adapter = _build_adapter(args, loaded, device, starting_fresh=resume is None)
    evaluate = heldout_evaluation(args, loaded, out, str(device)) if args.heldout_questions else None
    trainable = sum(p.numel() for p in adapter.parameters() if p.requires_grad)
    response_tokens = sum(int(s.response_ids.size) for s in samples)
    print(f"{loaded.name} on {device}: k={args.k}, rank={args.rank}, sampler={not args.no_sampler} "
          f"({args.sampler_form}), teacher weight {args.teacher_weight}, {trainable:,} trainable parameters; "
          f"{len(samples)} samples, {response_tokens:,} response tokens")
    base_info = {"name": loaded.name, "source_sha256": loaded.source_sha256}
    data_info = {"file": str(args.data), "samples": len(samples), "response_tokens": response_tokens,
                 "init": args.init}
    started = time.perf_counter()
    trainer = train(adapter, samples, _train_config(args), out, base_info, data_info, resume,
                    _progress_printer(args.steps, started), evaluate)
    if args.curve:
        write_curve(trainer.history, Path(args.curve))
    print(f"adapter written to {out} ({trainer.step} steps)")
    if args.release_copy:
        size = write_release_copy(out, args.release_copy)
        print(f"export-only copy written to {args.release_copy} ({size / 2**20:.1f} MiB)")
    print(json.dumps({"steps": trainer.step, "seconds_this_run": round(time.perf_counter() - started, 1)}))
    return 0


def _train_config(args: argparse.Namespace):
    from mtpedge.models.mtp_training import TrainConfig

    return TrainConfig(steps=args.steps, lr=args.lr, warmup=args.warmup, max_seq_len=args.max_seq_len,
                       max_blocks=args.max_blocks, lcm_weight=args.lcm_weight, seed=args.seed,
                       checkpoint_every=args.checkpoint_every, cosine_steps=args.cosine_steps,
                       teacher_weight=args.teacher_weight, time_limit=args.time_limit, precision=args.precision,
                       eval_every=args.eval_every if args.heldout_questions else 0)


def _build_adapter(args: argparse.Namespace, loaded, device, starting_fresh: bool):
    """The adapter on the base decoder, with --init's weights when a new run starts from a trained one."""
    from mtpedge.models.mtp_adapter import MtpAdapter, MtpConfig
    from mtpedge.models.mtp_training import load_checkpoint, start_from

    config = MtpConfig(k=args.k, rank=args.rank, alpha=args.alpha, sampler=not args.no_sampler,
                       sampler_form=args.sampler_form)
    loaded.decoder.to(device)
    adapter = MtpAdapter(loaded.decoder, config)
    if args.init and starting_fresh:
        from mtpedge.export.mtp_export import resolve_adapter

        start_from(adapter, load_checkpoint(resolve_adapter(args.init)), loaded.source_sha256)
    return adapter.to(device)


def _progress_printer(total_steps: int, started: float):
    def progress(m: dict) -> None:
        if "heldout" in m:
            print("held-out " + " ".join(f"{k} {v}" for k, v in m["heldout"].items()), flush=True)
            return
        depths = " ".join(f"{m[key]:.2f}" for key in sorted(m) if key.startswith("top1_m"))
        extra = f" sampler {m['ce_sampler']:.3f}" if "ce_sampler" in m else ""
        print(f"step {m['step']}/{total_steps} loss {m['loss']:.3f} (mask CE {m['ce_mask']:.3f}{extra}, "
              f"lcm {m.get('lcm', 0):.3f}; base NTP CE {m['ntp_ce']:.3f}) top1 per depth {depths} "
              f"{m['seconds']:.1f} s/step, {time.perf_counter() - started:.0f} s", flush=True)

    return progress


def heldout_evaluation(args: argparse.Namespace, loaded, out: Path, device: str):
    """evaluate(adapter) on the held-out questions; their greedy answers are made once, kept beside --out."""
    from mtpedge.bench.questions import heldout_turns
    from mtpedge.models.mtp_eval import HeldOut, heldout_tau, make_heldout

    questions = heldout_turns(args.heldout_questions)
    cache = out.with_name(out.name + ".heldout.npz")
    heldout = HeldOut.load(cache) if cache.is_file() else None
    prompts = [loaded.tokenizer.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True,
                                                    tokenize=True, return_dict=False) for q in questions]
    if heldout is None or heldout.budget != args.eval_tokens or [p.tolist() for p in heldout.prompts] != prompts:
        started = time.perf_counter()
        heldout = make_heldout(loaded, questions, args.eval_tokens, device=device)
        heldout.save(cache)
        print(f"held-out set: {len(questions)} questions, answers made in {time.perf_counter() - started:.0f} s "
              f"({cache})", flush=True)
    candidates = tuple(int(c) for c in args.eval_candidates.split(","))
    return lambda adapter: heldout_tau(adapter, heldout, candidates)

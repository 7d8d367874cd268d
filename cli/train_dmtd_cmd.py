"""mtpedge train-dmtd --data DIR --out DIR [--decoding-layers D] [--thinking-layers M] [--rank R] [--taus 2,3,4]
                    [--init default|FILE] [--steps N] [--lr-horizon H] [--time-limit S] [--resume]
                    [--heldout-questions question.jsonl] [--release-copy FILE] [--export-bundle BUNDLE_DIR]
                    [--bundle-precision auto|float32]

Trains a DMTD model (models/dmtd.py: LoRA copies of the base's last M + D layers, or at --rank 0 the layers
whole, under the cyclic gate, distilled from the base's own top-k; the base model stays as it is), writing
DIR/dmtd.pt every --checkpoint-every steps. --init starts a new run from a trained DMTD model. --release-copy writes
the small float16 form that is shipped; --export-bundle writes a bundle that holds the base model's graphs (tapped)
plus the copy's graphs (for `generate --drafter dmtd-spec` and the lossy `--drafter dmtd`), for a GGUF model on the
fast recipe unless --bundle-precision float32.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from mtpedge.bundles import PRECISIONS
from mtpedge.export_cmd import parse_widths


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", nargs="?", help="GGUF file or Hugging Face folder (default: embedded SmolLM2-135M)")
    parser.add_argument("--data", help="self-distilled data: the folder of `mtpedge distill` (or an .npz); needed "
                                       "when --steps > 0")
    parser.add_argument("--out", required=True, help="checkpoint folder (DIR/dmtd.pt)")
    parser.add_argument("--decoding-layers", type=int, default=6, help="D: layers that decode alone (default 6)")
    parser.add_argument("--thinking-layers", type=int, default=2,
                        help="M: trained thinking layers before them, refilled by the drafter (default 2)")
    parser.add_argument("--rank", type=int, default=32,
                        help="LoRA rank of every copied projection (default 32; 0: every weight of the copied layers "
                             "trains, as in the paper)")
    parser.add_argument("--init", default="",
                        help="start a new run from a DMTD model: 'default' (the shipped one) or a checkpoint; "
                             "with --rank 0 its LoRA is folded into the weights that then train (default: the "
                             "base's layers)")
    parser.add_argument("--taus", type=parse_widths, default=(2, 3, 4),
                        help="cycle lengths τ, one drawn per step (default 2,3,4: one model serves all three)")
    parser.add_argument("--steps", type=int, default=3000, help="training steps, one answer each (default 3000)")
    parser.add_argument("--lr", type=float, default=1e-3, help="peak learning rate (default 1e-3)")
    parser.add_argument("--lr-horizon", type=int, default=0,
                        help="step at which the cosine reaches 10%% of --lr (default: --steps of a new run; on "
                             "--resume the checkpoint's own). Stated on --resume, it replaces the checkpoint's: "
                             "the only way to train a finished run on at more than its floor rate")
    parser.add_argument("--time-limit", type=float, default=0.0, metavar="SECONDS",
                        help="stop after this many seconds of training (evaluations and earlier sessions of a resumed "
                             "run included), with the cosine laid over them instead of the step horizon; --steps "
                             "stays the upper bound (default 0: none)")
    parser.add_argument("--max-len", type=int, default=384, help="tokens per training sequence (default 384)")
    parser.add_argument("--checkpoint-every", type=int, default=100, help="steps between checkpoints (default 100)")
    parser.add_argument("--eval-every", type=int, default=250,
                        help="steps between held-out evaluations (with --heldout-questions; default 250)")
    parser.add_argument("--heldout-questions",
                        help="Spec-Bench question.jsonl: held-out dmtd-spec τ and lossy quality during training "
                             "(questions 5-6 of each category; the benchmark takes the first 4)")
    parser.add_argument("--resume", action="store_true", help="continue DIR/dmtd.pt")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    parser.add_argument("--device", default="auto", help="auto (CUDA when present, else CPU), cpu or cuda")
    parser.add_argument("--precision", default="float32", choices=("float32", "bfloat16"),
                        help="of the forward passes: float32 (default) or bfloat16 (matrix products in bfloat16 on AMX "
                             "CPUs and GPUs; weights, gradients and losses stay float32)")
    parser.add_argument("--release-copy", help="also write the trained weights in float16 here (what is shipped)")
    parser.add_argument("--export-bundle", help="after training, write a DMTD bundle here (base graphs + the copy's)")
    parser.add_argument("--context", type=int, default=1024, help="bundle context (default 1024)")
    parser.add_argument("--copy-widths", type=parse_widths, default=None,
                        help="widths of the copy's graphs besides the prefill width (default 1,4; 1,2,4 on the fast "
                             "recipe)")
    parser.add_argument("--bundle-precision", default="auto", choices=PRECISIONS,
                        help="of --export-bundle: auto (a GGUF model's bundle on its own grid and fast kernels, the "
                             "copy on 4-bit blocks; float32 for a Hugging Face folder) or float32")


def run(args: argparse.Namespace) -> int:
    import torch

    from mtpedge.models.device import resolve_device
    from mtpedge.models.dmtd import DmtdConfig
    from mtpedge.models.dmtd_train import CHECKPOINT, TrainSettings, train_dmtd, write_release
    from mtpedge.models.loading import load_model

    device = resolve_device(args.device)
    torch.set_num_threads(args.threads)
    init = ""
    if args.init:
        from mtpedge.export.dmtd_bundle import resolve_dmtd

        init = str(resolve_dmtd(args.init))
    model = DmtdConfig(decoding_layers=args.decoding_layers, thinking_layers=args.thinking_layers,
                       lora_rank=args.rank, lora_alpha=float(args.rank))
    settings = TrainSettings(model=model, taus=args.taus, steps=args.steps, lr=args.lr, lr_horizon=args.lr_horizon,
                             max_len=args.max_len, time_limit=args.time_limit, precision=args.precision,
                             init=init,
                             checkpoint_every=args.checkpoint_every, eval_every=args.eval_every)
    out = Path(args.out)
    loaded = load_model(args.model)
    loaded.decoder.to(device)
    ckpt = out / CHECKPOINT
    if args.steps > 0:
        if not args.data:
            raise ValueError("--data is needed to train (or pass --steps 0 with --export-bundle to export only)")
        evaluate = heldout_evaluation(args.heldout_questions, loaded, out, str(device)) \
            if args.heldout_questions else None
        ckpt = train_dmtd(loaded, Path(args.data), out, settings, resume=args.resume, progress=print,
                          evaluate=evaluate)
        print(f"checkpoint: {ckpt}")
    if (args.release_copy or args.export_bundle) and not ckpt.is_file():
        raise ValueError(f"{ckpt} does not exist: train first (--steps > 0)")
    loaded.decoder.to("cpu")  # the release and the graphs are made on the CPU
    if args.release_copy:
        size = write_release(ckpt, Path(args.release_copy), loaded)
        print(f"release copy: {args.release_copy} ({size / 2**20:.1f} MiB)")
    if args.export_bundle:
        from mtpedge.bundles import dmtd_export_config, is_fast
        from mtpedge.export.dmtd_bundle import export_dmtd_bundle

        config = dmtd_export_config(args.context, is_fast(args.model, args.bundle_precision),
                                    tuple(args.copy_widths) if args.copy_widths else None)
        export_dmtd_bundle(loaded, ckpt, Path(args.export_bundle), config, progress=print)
    return 0


def heldout_evaluation(questions: str, loaded, out: Path, device: str):
    """evaluate(model) -> held-out figures (models/dmtd_eval.py); the base's answers are made once and cached."""
    import numpy as np

    from mtpedge.bench.questions import heldout_turns
    from mtpedge.export.quality import HELD_TEXT
    from mtpedge.models.dmtd_eval import evaluate
    from mtpedge.models.mtp_eval import HeldOut, make_heldout

    cache = out / "heldout.npz"
    heldout = HeldOut.load(cache) if cache.is_file() else None
    if heldout is None:
        heldout = make_heldout(loaded, heldout_turns(questions), 128, device=device)
        out.mkdir(parents=True, exist_ok=True)
        heldout.save(cache)
    held = np.asarray(loaded.tokenizer(HELD_TEXT, add_special_tokens=False)["input_ids"][:512], dtype=np.int64)
    return lambda model: evaluate(loaded.decoder, model, heldout, held)

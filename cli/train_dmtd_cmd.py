"""mtpedge train-dmtd --data FILE.npz --out DIR [--decoding-layers D] [--taus 2,3,4] [--steps N] [--resume]
                    [--export-bundle BUNDLE_DIR]

Trains a copy of the last D layers under DMTD's cyclic gate (the base model stays as it is), writing
DIR/dmtd.pt every --checkpoint-every steps; --export-bundle then writes a bundle that holds the base model's
graphs (their thinking layers' output tapped) plus the copy's graphs (for `generate --drafter dmtd-spec` and
the lossy `--drafter dmtd`).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from mtpedge.export_cmd import parse_widths


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", nargs="?", help="GGUF file or Hugging Face folder (default: embedded SmolLM2-135M)")
    parser.add_argument("--data", help="self-distilled data (.npz from `mtpedge distill`); needed when --steps > 0")
    parser.add_argument("--out", required=True, help="checkpoint folder (DIR/dmtd.pt)")
    parser.add_argument("--decoding-layers", type=int, default=4, help="D: layers that decode alone (default 4)")
    parser.add_argument("--taus", type=parse_widths, default=(2, 3, 4),
                        help="cycle lengths τ, one drawn per step (default 2,3,4: one checkpoint serves all three)")
    parser.add_argument("--steps", type=int, default=2000, help="training steps, one sequence each (default 2000)")
    parser.add_argument("--lr", type=float, default=1e-4, help="peak learning rate (default 1e-4, as the paper)")
    parser.add_argument("--max-len", type=int, default=256, help="tokens per training sequence (default 256)")
    parser.add_argument("--checkpoint-every", type=int, default=100, help="steps between checkpoints (default 100)")
    parser.add_argument("--eval-every", type=int, default=250,
                        help="steps between held-text perplexity checks (default 250, 0 = never)")
    parser.add_argument("--resume", action="store_true", help="continue DIR/dmtd.pt")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    parser.add_argument("--device", default="auto", help="auto (CUDA when present, else CPU), cpu or cuda")
    parser.add_argument("--export-bundle", help="after training, write a DMTD bundle here (base graphs + the copy's)")
    parser.add_argument("--context", type=int, default=1024, help="bundle context (default 1024)")
    parser.add_argument("--copy-widths", type=parse_widths, default=(1, 4, 8),
                        help="widths of the copy's graphs besides the prefill width (default 1,4,8)")


def run(args: argparse.Namespace) -> int:
    import torch

    from mtpedge.models.device import resolve_device
    from mtpedge.models.dmtd_train import CHECKPOINT, TrainSettings, train_dmtd
    from mtpedge.models.loading import load_model

    device = resolve_device(args.device)
    torch.set_num_threads(args.threads)
    settings = TrainSettings(decoding_layers=args.decoding_layers, taus=args.taus, steps=args.steps, lr=args.lr,
                             max_len=args.max_len, checkpoint_every=args.checkpoint_every,
                             eval_every=args.eval_every)
    out = Path(args.out)
    loaded = load_model(args.model)
    loaded.decoder.to(device)
    ckpt = out / CHECKPOINT
    if args.steps > 0:
        if not args.data:
            raise ValueError("--data is needed to train (or pass --steps 0 with --export-bundle to export only)")
        ckpt = train_dmtd(loaded, Path(args.data), out, settings, resume=args.resume, progress=print)
        print(f"checkpoint: {ckpt}")
    if args.export_bundle:
        from mtpedge.export.dmtd_bundle import DmtdExportConfig, export_dmtd_bundle

        if not ckpt.is_file():
            raise ValueError(f"{ckpt} does not exist: train first (--steps > 0)")
        loaded.decoder.to("cpu")  # the graphs are traced on the CPU
        config = DmtdExportConfig(context=args.context, copy_widths=tuple(args.copy_widths))
        export_dmtd_bundle(loaded, ckpt, Path(args.export_bundle), config, progress=print)
    return 0

"""mtpedge export [MODEL] [--out DIR] [--context C] [--prefill-width N] [--decode-widths 1,16]"""

from __future__ import annotations

import argparse
import sys

from mtpedge.bundles import default_bundle_dir


def parse_widths(text: str) -> tuple[int, ...]:
    try:
        widths = tuple(int(w) for w in text.split(",") if w.strip())
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"widths must be comma-separated integers, got {text!r}") from err
    if not widths:
        raise argparse.ArgumentTypeError("at least one width is needed")
    return widths


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", nargs="?", help="GGUF file or Hugging Face folder (default: embedded SmolLM2-135M)")
    parser.add_argument("--out", help="bundle folder (default: the cache folder that generate/chat use)")
    parser.add_argument("--context", type=int, default=1024, help="KV cache positions C (default 1024)")
    parser.add_argument("--prefill-width", type=int, default=64, help="slots of the prefill graph (default 64)")
    parser.add_argument("--decode-widths", type=parse_widths, default=(1, 16),
                        help="comma-separated slots of the decode graphs (default 1,16)")
    parser.add_argument("--no-parity-check", action="store_true", help="skip the per-graph check against PyTorch")


def run(args: argparse.Namespace) -> int:
    try:
        from mtpedge.export.bundle_writer import ExportConfig, export_bundle
        from mtpedge.models.loading import ModelLoadError
    except ImportError as err:
        raise SystemExit(
            f"export needs the export extras ({err.name} is missing): pip install 'mtpedge[export]'"
        ) from err
    out = args.out or default_bundle_dir(args.model, args.context)
    config = ExportConfig(context=args.context, prefill_width=args.prefill_width,
                          decode_widths=args.decode_widths, check_parity=not args.no_parity_check)
    try:
        export_bundle(args.model, out, config, progress=print)
    except ModelLoadError as err:
        print(f"mtpedge export: error: {err}", file=sys.stderr)
        return 2
    return 0

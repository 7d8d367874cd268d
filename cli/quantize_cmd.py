"""mtpedge quantize FLOAT_BUNDLE --out DIR [--precision gguf|int8|int4|qdq] [--gguf FILE] [--output-layer P]

The same step `mtpedge export --precision` runs after tracing, applied to a float32 bundle already on disk.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from mtpedge.export_cmd import add_precision_arguments, quant_config


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("bundle", help="a float32 bundle folder (from `mtpedge export --precision float32`)")
    parser.add_argument("--out", required=True, help="folder of the quantized bundle")
    parser.add_argument("--gguf", help="the GGUF file the bundle was exported from (needed by --precision gguf)")
    add_precision_arguments(parser, with_auto=False)
    parser.set_defaults(precision="gguf")


def run(args: argparse.Namespace) -> int:
    try:
        from mtpedge.export.precision import finish_bundle
    except ImportError as err:
        raise SystemExit(f"quantize needs the export extras ("
                         f"{err.name} is missing): pip install 'mtpedge[export]'") from err
    config = quant_config(args, is_gguf=args.gguf is not None)
    if config is None:
        raise ValueError("--precision float32 has nothing to do: the bundle is float32 already")
    gguf = Path(args.gguf) if args.gguf else None
    finish_bundle(Path(args.bundle), Path(args.out), config, None, gguf, progress=print)
    return 0

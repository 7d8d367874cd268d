"""mtpedge compile-qnn QDQ_BUNDLE --soc NAME --out DIR: QNN context binaries for one Snapdragon SoC."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("bundle", help="a QDQ bundle (from `mtpedge export --precision qdq`)")
    parser.add_argument("--soc", required=True, help="e.g. snapdragon-8-elite (sm8750), snapdragon-8-gen-3 (sm8650)")
    parser.add_argument("--out", required=True, help="folder of the compiled bundle")


def run(args: argparse.Namespace) -> int:
    from mtpedge.export.qnn_compile import compile_qnn_bundle

    compile_qnn_bundle(args.bundle, args.out, args.soc, progress=print)
    return 0

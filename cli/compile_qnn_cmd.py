"""mtpedge compile-qnn QDQ_BUNDLE --soc NAME --out DIR [--no-share-weights]: QNN context binaries for one SoC."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("bundle", help="a QDQ bundle (from `mtpedge export --precision qdq`)")
    parser.add_argument("--soc", required=True, help="e.g. snapdragon-8-elite (sm8750), snapdragon-8-gen-3 (sm8650)")
    parser.add_argument("--out", required=True, help="folder of the compiled bundle")
    parser.add_argument("--no-share-weights", action="store_true",
                        help="one context binary per graph, each with its own copy of the weights: the form the x86 "
                             "HTP simulator can load (default: one binary whose graphs share one copy, for devices)")


def run(args: argparse.Namespace) -> int:
    from mtpedge.export.qnn_compile import compile_qnn_bundle

    compile_qnn_bundle(args.bundle, args.out, args.soc, share_weights=not args.no_share_weights, progress=print)
    return 0

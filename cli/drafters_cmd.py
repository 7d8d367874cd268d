"""mtpedge drafters: every drafter with its options, defaults and help (built from the registry)."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    pass


def run(args: argparse.Namespace) -> int:
    from mtpedge.runtime.drafters import describe_drafters

    print(describe_drafters())
    return 0

"""mtpedge hub compile|profile|inference QDQ_BUNDLE (--device NAME | --chipset NAME) [--no-link] [--dry-run]

Builds Qualcomm AI Hub jobs from the bundle's manifest and submits them with the qai-hub client.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=["compile", "profile", "inference"])
    parser.add_argument("bundle", help="a QDQ bundle (from `mtpedge export --precision qdq`)")
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--device", help='an AI Hub device name, e.g. "Samsung Galaxy S25 (Family)"')
    where.add_argument("--chipset", help="an AI Hub chipset, e.g. qualcomm-snapdragon-8-elite")
    parser.add_argument("--no-link", action="store_true", help="do not link the compiled graphs into one binary")
    parser.add_argument("--dry-run", action="store_true", help="print the job specs as JSON; submit nothing")


def run(args: argparse.Namespace) -> int:
    from mtpedge.export.aihub import HubDevice, build_jobs, explain_hub_error, hub_client, submit_jobs

    device = HubDevice(name=args.device or "", chipset=args.chipset or "")
    jobs = build_jobs(args.bundle, device, args.action, link=not args.no_link)
    if args.dry_run:
        print(json.dumps([asdict(job) for job in jobs], indent=2))
        return 0
    client = hub_client()
    try:
        submitted = submit_jobs(jobs, device, client, args.bundle)
    except Exception as err:  # the client raises its own error types, and requests' for the network
        print(f"mtpedge hub: {explain_hub_error(err)}")
        return 2
    for name, job in submitted.items():
        print(f"{name}: {getattr(job, 'url', job)}")
    return 0

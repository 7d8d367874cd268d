"""mtpedge hub compile|profile|inference QDQ_BUNDLE (--device NAME | --chipset NAME) [--no-link] [--dry-run]
[--cost-file FILE]

Builds Qualcomm AI Hub jobs from the bundle's manifest and submits them with the qai-hub client. `profile`
then waits for the profiles and writes the bundle's cost table (per-width seconds per call on that device).
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
    parser.add_argument("--cost-file", help="profile: where to write the cost table (default: BUNDLE.cost-aihub.json "
                        "beside the bundle folder)")


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from mtpedge.export.aihub import (
        HubDevice,
        build_jobs,
        explain_hub_error,
        hub_client,
        submit_jobs,
        write_profile_cost_table,
    )

    device = HubDevice(name=args.device or "", chipset=args.chipset or "")
    jobs = build_jobs(args.bundle, device, args.action, link=not args.no_link)
    if args.dry_run:
        print(json.dumps([asdict(job) for job in jobs], indent=2))
        return 0
    client = hub_client()
    bundle = Path(args.bundle)
    cost_file = Path(args.cost_file) if args.cost_file else bundle.parent / f"{bundle.name}.cost-aihub.json"
    try:
        submitted = submit_jobs(jobs, device, client, bundle)
        for name, job in submitted.items():
            print(f"{name}: {getattr(job, 'url', job)}")
        if args.action == "profile":
            print("waiting for the profile jobs (minutes on a shared device)...")
            table = write_profile_cost_table(jobs, submitted, bundle, device, cost_file)
            widths = ", ".join(f"{w}: {s * 1000:.2f} ms" for w, s in sorted(table.seconds.items()))
            print(f"cost table written to {cost_file} ({widths})")
    except ValueError as err:  # a profile without the times the cost table needs
        print(f"mtpedge hub: {err}")
        return 2
    except Exception as err:  # the client raises its own error types, and requests' for the network
        print(f"mtpedge hub: {explain_hub_error(err)}")
        return 2
    return 0

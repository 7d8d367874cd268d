"""mtpedge verify BUNDLE: every file of a bundle against the size and SHA-256 its export recorded.

Exit status 0 when every recorded file is intact, 1 when one is missing or changed, or when the bundle was
exported before mtpedge recorded hashes (there is nothing to check it against: re-export it to get them).
Files the export did not write (e.g. a cost table saved later) are listed, not checked.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from mtpedge.runtime.bundle import read_manifest, verify_files

PROBLEMS = {"missing": "MISSING", "size": "WRONG SIZE", "changed": "CHANGED"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("bundle", help="bundle folder")


def run(args: argparse.Namespace) -> int:
    folder = Path(args.bundle)
    manifest = read_manifest(folder, check_sizes=False)  # the names, links and structure; sizes listed below
    if not manifest.files:
        print(f"{folder}: exported before mtpedge recorded file hashes, so there is nothing to verify it against; "
              "re-export it (`mtpedge export`) to record them")
        return 1
    checks = verify_files(folder, manifest)
    for check in checks:
        label = PROBLEMS.get(check.status, check.status)
        note = "not written by the export: not checked" if check.status == "unlisted" else check.detail
        print(f"  {label:<10} {check.name}" + (f" ({note})" if note else ""))
    bad = [c for c in checks if c.status in PROBLEMS]
    if bad:
        print(f"{folder}: {len(bad)} of {len(manifest.files)} files differ from the export: re-export the bundle "
              "(`mtpedge export`), or copy it again from its source")
        return 1
    print(f"{folder}: all {len(manifest.files)} files match the export's SHA-256")
    return 0

"""Spec-Bench questions for tests and benchmarks (the file ships beside the repository in shared/)."""

from __future__ import annotations

import json
import os
from pathlib import Path


def question_file() -> Path:
    env = os.environ.get("MTPEDGE_SPEC_BENCH")
    candidates = [Path(env)] if env else []
    root = Path(__file__).resolve().parents[1]
    candidates += [root.parent / "shared/data/spec_bench/question.jsonl"]
    for path in candidates:
        if path.is_file():
            return path
    raise FileNotFoundError(f"Spec-Bench question.jsonl not found (looked in {[str(c) for c in candidates]}); "
                            "set MTPEDGE_SPEC_BENCH")


def questions(per_category: int, max_chars: int = 1500) -> list[dict]:
    """The first `per_category` questions of every category whose first turn is at most max_chars long."""
    picked: dict[str, list[dict]] = {}
    for line in question_file().read_text().splitlines():
        q = json.loads(line)
        bucket = picked.setdefault(q["category"], [])
        if len(bucket) < per_category and len(q["turns"][0]) <= max_chars:
            bucket.append(q)
    return [q for bucket in picked.values() for q in bucket]

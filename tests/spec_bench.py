"""Spec-Bench questions for tests and benchmarks: the file shipped with mtpedge (bench/data/spec_bench)."""

from __future__ import annotations

import json
from pathlib import Path

from mtpedge.bench.questions import SPEC_BENCH


def question_file() -> Path:
    return SPEC_BENCH


def questions(per_category: int, max_chars: int = 1500) -> list[dict]:
    """The first `per_category` questions of every category whose first turn is at most max_chars long."""
    picked: dict[str, list[dict]] = {}
    for line in SPEC_BENCH.read_text().splitlines():
        q = json.loads(line)
        bucket = picked.setdefault(q["category"], [])
        if len(bucket) < per_category and len(q["turns"][0]) <= max_chars:
            bucket.append(q)
    return [q for bucket in picked.values() for q in bucket]

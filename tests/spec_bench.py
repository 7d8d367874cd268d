"""Spec-Bench questions for the slow tests: the file shipped with mtpedge, read through bench's API."""

from __future__ import annotations

from mtpedge.bench.questions import SPEC_BENCH, Question, load_questions


def short_questions(per_category: int, max_chars: int = 1500) -> list[Question]:
    """The first `per_category` questions of every category among those whose first turn is at most max_chars long."""
    return load_questions(SPEC_BENCH, limit=per_category, max_chars=max_chars)

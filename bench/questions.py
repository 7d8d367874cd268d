"""The Spec-Bench question file: one JSON object a line, `{"question_id", "category", "turns": [...]}`, and which
of its questions a run answers.

Which `limit` questions of each category (`pick`):
    first    the first ones, in file order
    spread   evenly over the category: every (n // limit)-th from the first (the old interleaved benchmarks' 52)
    between  halfway between spread's: as many questions, none of spread's (where a category holds 2 x limit
             or more), for exploring settings without tuning them on the questions a final run reports

The held-out set (`heldout_turns`) is what training measures itself on: questions 5-6 of each category, which
the benchmark (the first 4 of each) never reports.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

# Spec-Bench's question file, shipped with mtpedge (Apache-2.0; data/spec_bench/SOURCE.md says where it is from)
SPEC_BENCH = Path(__file__).parent / "data" / "spec_bench" / "question.jsonl"


class QuestionFileError(ValueError):
    """A question file that cannot be used; the message says which line and what to fix."""


PICKS = ("first", "spread", "between")


@dataclass(frozen=True)
class Question:
    question_id: int | str
    category: str
    turns: tuple[str, ...]
    reference: tuple[str, ...] = ()  # reference answers, where Spec-Bench has them (e.g. GSM8K's, after "####")


def parse_questions(lines: Sequence[str], source: str = "<questions>") -> list[Question]:
    questions = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except json.JSONDecodeError as err:
            raise QuestionFileError(f"{source}:{number} is not JSON ({err.msg}): one JSON object per line") from err
        turns = data.get("turns") if isinstance(data, dict) else None
        if (not isinstance(turns, list) or not turns or not all(isinstance(t, str) and t for t in turns)
                or "question_id" not in data or not isinstance(data.get("category"), str)):
            raise QuestionFileError(f"{source}:{number} needs question_id, a category string and a non-empty "
                                    "list of turn strings (the Spec-Bench format)")
        reference = data.get("reference") or ()
        questions.append(Question(data["question_id"], data["category"], tuple(turns),
                                  tuple(str(r) for r in reference) if isinstance(reference, list) else ()))
    if not questions:
        raise QuestionFileError(f"{source} holds no questions")
    return questions


def select_questions(questions: Sequence[Question], categories: Sequence[str] | None = None,
                     limit: int | None = None, pick: str = "first", skip: int = 0,
                     max_chars: int | None = None) -> list[Question]:
    """The questions of `categories` (all if None): after leaving out the first `skip` of each category, at most
    `limit` of the rest chosen by `pick` (a stratified subset that keeps every category), in file order.
    max_chars: only questions whose first turn is at most that long count (before skip and limit)."""
    known = list(dict.fromkeys(q.category for q in questions))
    if categories:
        unknown = [c for c in categories if c not in known]
        if unknown:
            raise QuestionFileError(f"unknown categories {unknown}: the file has {', '.join(known)}")
    if limit is not None and limit < 1:
        raise QuestionFileError(f"--limit must be at least 1, got {limit}")
    if skip < 0:
        raise QuestionFileError(f"--skip must be at least 0, got {skip}")
    if pick not in PICKS:
        raise QuestionFileError(f"--pick must be one of {', '.join(PICKS)}, got {pick!r}")
    wanted = set(categories) if categories else set(known)
    by_category: dict[str, list[int]] = {}  # positions in the file
    for i, q in enumerate(questions):
        if q.category in wanted and (max_chars is None or len(q.turns[0]) <= max_chars):
            by_category.setdefault(q.category, []).append(i)
    return [questions[i] for i in sorted(i for positions in by_category.values()
                                         for i in _pick(positions[skip:], limit, pick))]


def _pick(positions: list[int], limit: int | None, pick: str) -> list[int]:
    if limit is None:
        return positions
    if pick == "first":
        return positions[:limit]
    step = max(1, len(positions) // limit)
    return positions[step // 2 if pick == "between" else 0::step][:limit]


def round_robin(questions: Sequence[Question]) -> list[Question]:
    """The first question of every category, then the second of each, ...: the run order, so that a run cut
    short by its time limit still covers every category about equally."""
    by_category: dict[str, list[Question]] = {}
    for q in questions:
        by_category.setdefault(q.category, []).append(q)
    rounds = max((len(qs) for qs in by_category.values()), default=0)
    return [qs[i] for i in range(rounds) for qs in by_category.values() if i < len(qs)]


def load_questions(path: str | Path, categories: Sequence[str] | None = None, limit: int | None = None,
                   pick: str = "first", skip: int = 0, max_chars: int | None = None) -> list[Question]:
    path = Path(path)
    if not path.is_file():
        raise QuestionFileError(f"question file {path} does not exist: pass another --questions, or leave it out "
                                f"for the shipped Spec-Bench file")
    return select_questions(parse_questions(path.read_text().splitlines(), str(path)), categories, limit, pick, skip,
                            max_chars)


def heldout_turns(path: str | Path = SPEC_BENCH, skip: int = 4, take: int = 2, max_chars: int = 1500) -> list[str]:
    """First turns of questions skip+1 .. skip+take of each category (among those whose first turn has at most
    max_chars characters), in file order: not the benchmark's first `skip` of each category."""
    return [q.turns[0] for q in load_questions(path, limit=take, skip=skip, max_chars=max_chars)]


def all_turns(path: str | Path = SPEC_BENCH) -> list[str]:
    """Every turn of every question (what training data must not repeat)."""
    return [turn for q in load_questions(path) for turn in q.turns]


# A handful of built-in questions for `mtpedge bench --quick` when no question file is given (CI smoke tests):
# two categories, one two-turn question, and a repetitive one where prompt lookup has something to copy.
QUICK_QUESTIONS = (
    Question("quick-1", "writing", ("Write two sentences about a small red fox.", "Now say it in one sentence.")),
    Question("quick-2", "extraction", ("Copy this list exactly: one, two, three, one, two, three.",)),
)

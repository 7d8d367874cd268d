"""The interleaved loop: every method answers a question (all its turns) before the next question starts,
in an order rotated per question, so that machine drift and cache warmth hit all methods alike."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

from .memory import RssMonitor
from .methods import Method
from .questions import Question

log = logging.getLogger(__name__)
BASELINE = "none"


@dataclass
class Row:
    """One method's answer to one turn of one question."""

    question_id: int | str
    category: str
    turn: int  # 1-based
    method: str
    prompt_tokens: int
    new_tokens: int = 0
    decode_calls: int | None = None
    accepted_per_call: dict[str, int] | None = None  # {"k": calls that accepted k drafts}
    tokens_per_s: float = 0.0
    first_token_s: float = 0.0
    elapsed_s: float = 0.0
    graph_s: float | None = None
    # a cost-aware drafter's predicted and achieved tokens/s over its timed steps (runtime/tree_sizing.StepSizer)
    predicted_tokens_per_s: float | None = None
    achieved_step_tokens_per_s: float | None = None
    same_as_baseline: bool | None = None  # None: no baseline, or its prompt differed (earlier turns differed)
    first_difference: int | None = None  # first new-token index where the output leaves the baseline's
    skipped: str | None = None

    def to_dict(self) -> dict:
        return asdict(self)


def rotated(items: Sequence, shift: int) -> list:
    """`items` starting at position shift (mod len): round `shift` of an interleaved run."""
    shift %= len(items)
    return [*items[shift:], *items[:shift]]


def first_difference(a: Sequence[int], b: Sequence[int]) -> int | None:
    """Index of the first differing token (the shorter length if one is a prefix), None if equal."""
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def run_questions(methods: Sequence[Method], questions: Sequence[Question], tokenizer, context: int,
                  max_new_tokens: int, monitor: RssMonitor | None = None,
                  on_question: Callable[[Question], None] | None = None, deadline: float | None = None,
                  max_turns: int | None = None) -> list[Row]:
    """Greedy answers of every method to every turn, or to the first `max_turns` (each method continues its own
    conversation).

    `deadline` (a time.perf_counter() value): no question starts after it; a started one finishes.
    """
    rows: list[Row] = []
    for index, question in enumerate(questions):
        if deadline is not None and time.perf_counter() > deadline:
            log.warning("time limit reached: %d of %d questions answered", index, len(questions))
            break
        order = rotated(methods, index)
        outputs: dict[tuple[str, int], tuple[list[int], list[int]]] = {}  # (method, turn) -> (prompt, new ids)
        for method in order:
            messages: list[dict[str, str]] = []
            for turn, text in enumerate(question.turns[:max_turns], start=1):
                messages.append({"role": "user", "content": text})
                prompt = tokenizer.encode_chat(messages)
                row = Row(question.question_id, question.category, turn, method.name, len(prompt))
                rows.append(row)
                if len(prompt) + max_new_tokens > context:
                    row.skipped = (f"prompt {len(prompt)} + {max_new_tokens} new tokens exceed the bundle's "
                                   f"context {context}")
                    break
                if monitor:
                    with monitor.window(method.name):
                        run = method.generate(prompt, max_new_tokens)
                else:
                    run = method.generate(prompt, max_new_tokens)
                row.new_tokens, row.tokens_per_s = run.new_tokens, run.tokens_per_s
                row.first_token_s, row.elapsed_s, row.graph_s = run.first_token_s, run.elapsed_s, run.graph_s
                row.decode_calls = run.decode_calls
                sizing = run.extra.get("sizing") or {}
                row.predicted_tokens_per_s = sizing.get("predicted_tokens_per_s")
                row.achieved_step_tokens_per_s = sizing.get("achieved_tokens_per_s")
                if run.accepted_histogram is not None:
                    row.accepted_per_call = {str(k): v for k, v in sorted(run.accepted_histogram.items())}
                outputs[(method.name, turn)] = (prompt, run.token_ids)
                messages.append({"role": "assistant", "content": tokenizer.decode(run.token_ids)})
        _compare_with_baseline(rows, outputs, question)
        if on_question:
            on_question(question)
    return rows


def _compare_with_baseline(rows: list[Row], outputs: dict, question: Question) -> None:
    for row in rows:
        if row.question_id != question.question_id or row.skipped:
            continue
        base = outputs.get((BASELINE, row.turn))
        mine = outputs.get((row.method, row.turn))
        if base is None or mine is None or base[0] != mine[0]:
            continue  # no baseline, or the prompts differ because an earlier turn's answers did
        row.first_difference = first_difference(mine[1], base[1])
        row.same_as_baseline = row.first_difference is None

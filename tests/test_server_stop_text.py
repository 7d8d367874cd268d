"""Stop strings on streamed text: the released text never contains a stop string or anything after it,
however the text is split into deltas."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mtpedge.server.stop_text import StopText


def run(stops: list[str], deltas: list[str]) -> tuple[str, bool]:
    matcher, out = StopText(stops), []
    for delta in deltas:
        text, stopped = matcher.push(delta)
        out.append(text)
        if stopped:
            return "".join(out), True
    return "".join(out) + matcher.flush(), False


def expected(stops: list[str], text: str) -> tuple[str, bool]:
    """The text as it grows one character at a time: cut where the first stop string to complete begins."""
    for end in range(len(text) + 1):
        starts = [end - len(s) for s in stops if text[:end].endswith(s)]
        if starts:
            return text[: min(starts)], True
    return text, False


def test_a_stop_split_over_deltas_is_held_back_then_cut():
    matcher = StopText(["\n\n", "User:"])
    assert matcher.push("Hello\n") == ("Hello", False)
    assert matcher.push("\nUser") == ("", True)
    assert matcher.flush() == ""


def test_a_false_start_is_released_later():
    matcher = StopText(["END"])
    assert matcher.push("the EN") == ("the ", False)
    assert matcher.push("D") == ("", True)
    matcher = StopText(["END"])
    assert matcher.push("the EN") == ("the ", False)
    assert matcher.push("ough") == ("ENough", False)
    assert matcher.flush() == ""


def test_the_first_stop_to_complete_wins_however_the_text_is_split():
    assert run(["cd", "b"], ["abcd"]) == ("a", True)
    # "\n" completes before "a\n\n" would: generation halts there, whether the text came in one delta or two
    assert run(["\n", "a\n\n"], ["a\n\n"]) == run(["\n", "a\n\n"], ["a\n", "\n"]) == ("a", True)
    assert run(["b", "ab"], ["ab"]) == ("", True)  # both complete at once: the longer one, which begins first


@pytest.mark.parametrize("text", ["abcabcabd", "xxENDxx", "no stop here", "E", "ENENEND"])
def test_every_split_gives_the_same_text(text):
    stops = ["abd", "END"]
    for i in range(len(text) + 1):
        for j in range(i, len(text) + 1):
            assert run(stops, [text[:i], text[i:j], text[j:]]) == expected(stops, text), (i, j)


@given(st.lists(st.text("ab\n", min_size=1, max_size=3), min_size=1, max_size=3),
       st.lists(st.text("ab\n", max_size=4), max_size=8))
def test_property_streamed_equals_whole(stops, deltas):
    assert run(stops, deltas) == expected(stops, "".join(deltas))


def test_empty_stop_strings_are_refused():
    with pytest.raises(ValueError, match="non-empty"):
        StopText([""])

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
    cuts = [i for i in (text.find(s) for s in stops) if i >= 0]
    return (text[: min(cuts)], True) if cuts else (text, False)


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


def test_the_earliest_of_several_stops_wins():
    assert run(["cd", "b"], ["abcd"]) == ("a", True)


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

"""OpenAI `stop` sequences: cut generated text at the first stop string to complete, even while streaming.

A stop string can arrive split over several token deltas, so a streamed delta is released only up to the
longest tail that could still be the start of a stop string; that tail is held back until the next delta
decides it (or the generation ends and it is flushed).

    matcher = StopText(["\\n\\n", "User:"])
    matcher.push("Hello\\n")   -> ("Hello", False)     # "\\n" held back: it may begin "\\n\\n"
    matcher.push("\\nUser")    -> ("", True)           # "\\n\\n" found; nothing after it is released
"""

from __future__ import annotations

from collections.abc import Sequence


class StopText:
    def __init__(self, stops: Sequence[str]) -> None:
        if any(not s for s in stops):
            raise ValueError("stop sequences must be non-empty strings")
        self.stops = tuple(stops)
        self.pending = ""  # text received but not yet released
        self.stopped = False

    def push(self, delta: str) -> tuple[str, bool]:
        """Add newly decoded text; returns (text safe to release now, whether a stop string was found)."""
        if self.stopped:
            return "", True
        text = self.pending + delta
        cut = self._first_completed(text)
        if cut >= 0:
            self.pending, self.stopped = "", True
            return text[:cut], True
        hold = self._partial_tail(text)
        self.pending = text[len(text) - hold:] if hold else ""
        return text[: len(text) - hold], False

    def flush(self) -> str:
        """The held-back tail, released when generation ends without a stop string."""
        text, self.pending = self.pending, ""
        return "" if self.stopped else text

    def _first_completed(self, text: str) -> int:
        """Where the stop string that `text` completes first begins (-1: none): the match that ends earliest, the
        longer one on a tie. Generation halts at the first completed stop, so a stop that would begin earlier but
        end later (stops "\n" and "a\n\n" in "a\n\n") never completes; the earliest *start* would cut the
        same text differently depending on how it was split into deltas."""
        found = [(i + len(stop), i) for stop in self.stops if (i := text.find(stop)) >= 0]
        return min(found)[1] if found else -1

    def _partial_tail(self, text: str) -> int:
        """Length of the longest suffix of `text` that is a proper prefix of some stop string."""
        best = 0
        for stop in self.stops:
            for k in range(min(len(stop) - 1, len(text)), best, -1):
                if stop.startswith(text[-k:]):
                    best = k
                    break
        return best

"""The trainers' learning-rate schedule: linear warm-up, then cosine decay to a tenth at a fixed horizon, counted
in steps or, for a run given a time limit, in seconds of training."""

from __future__ import annotations

import math
import time


def learning_rate(step: int, peak: float, warmup: int, horizon: int, progress: float | None = None) -> float:
    """The rate at `step` (0-based): warm-up over the first `warmup` steps, times a cosine from 1 down to 0.1 at
    step `horizon` (flat after it); horizon <= 0: no decay. `progress` in [0, 1], when given, places the cosine
    instead of step / horizon (a time-limited run: the share of its time spent).

    The horizon is fixed when a run starts, not taken from the step count asked of this session, so that a
    resumed run (even one asked to go on longer) keeps the schedule it started with.
    """
    warm = min(1.0, (step + 1) / max(1, warmup))
    if progress is None:
        if horizon <= 0:
            return peak * warm
        progress = step / horizon
    progress = min(1.0, max(0.0, progress))
    return peak * warm * (0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * progress)))


class TrainingClock:
    """Seconds of training so far, earlier sessions of a resumed run included, against an optional limit.

    A run given a time limit (`--time-limit S`) stops at the first step boundary past S seconds and lays its
    cosine over those S seconds, so the same command fits a budget on any machine: a GPU lent for minutes, or a
    CPU for hours. Its rate then depends on the machine's speed, which a step-counted run's does not.
    """

    def __init__(self, limit: float = 0.0, spent: float = 0.0) -> None:
        if limit < 0:
            raise ValueError(f"the time limit must be >= 0 seconds (0: none), got {limit}")
        self.limit, self.spent, self._started = limit, spent, time.perf_counter()

    def seconds(self) -> float:
        return self.spent + time.perf_counter() - self._started

    def progress(self) -> float | None:
        """The share of the time limit spent, or None without a limit."""
        return min(1.0, self.seconds() / self.limit) if self.limit else None

    def out_of_time(self) -> bool:
        return bool(self.limit) and self.seconds() >= self.limit

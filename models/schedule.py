"""The trainers' learning-rate schedule: linear warm-up, then cosine decay to a tenth at a fixed horizon."""

from __future__ import annotations

import math


def learning_rate(step: int, peak: float, warmup: int, horizon: int) -> float:
    """The rate at `step` (0-based): warm-up over the first `warmup` steps, times a cosine from 1 down to 0.1 at
    step `horizon` (flat after it); horizon <= 0: no decay.

    The horizon is fixed when a run starts, not taken from the step count asked of this session, so that a
    resumed run (even one asked to go on longer) keeps the schedule it started with.
    """
    warm = min(1.0, (step + 1) / max(1, warmup))
    if horizon <= 0:
        return peak * warm
    progress = min(1.0, step / horizon)
    return peak * warm * (0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * progress)))

"""How big a draft tree pays: the candidates to keep and the graph width to call, for the most tokens per second.

A step verifies its tree in one graph call of width w. In expectation it commits

    E[tokens] = 1 + sum of the kept candidates' acceptance probabilities

(linearity of expectation: a candidate adds one token exactly when it and all its ancestors are accepted;
the 1 is the call's own token), and it costs cost(w) + host seconds. Keeping the n most probable candidates
is the best tree of n nodes (a candidate never scores above its parent, so the n best form a connected
tree), and a tree of n candidates runs in the narrowest graph that holds its slots. So the choice is one
number, n, and it is searched exhaustively:

    n* = argmax_n (1 + s_1 + ... + s_n) / (cost(narrowest width >= slots(n)) + host(slots(n)))

On a flat cost table (an NPU: every width costs the same) the tree grows to the widest graph; where a wide
call costs several narrow ones (this CPU) it shrinks to what its candidates' probabilities pay for.
Candidate probabilities come from the drafter: its candidate scores (a mask's softmax times its parent's),
or running per-depth acceptance rates (`acceptance.DepthRates.chain_scores`) for chains.

Those estimates learn only from drafts that are made, so a sizer whose estimates start below what a wider call
costs would never draft and never learn otherwise (it happened: results/fast section 15, `lookup` drafting nothing
in a whole bench run). `StepSizer` therefore explores: after `explore_every` steps in a row that had candidates
but kept none, it keeps the best tree of at least one candidate once. Where drafts do not pay that costs one wider
call in `explore_every` steps (a width-4 call at 1.87x a width-1 call, every 32nd step: under 3%).

The cost table is measured once, at the full context, call after call in a tight loop; a run's calls see smaller
context buckets, caches the host work between them has cooled, and the machine's load. On the fourteenth
session's AMD EPYC the table read width-1 / 2 / 4 calls at 18.95 / 19.69 / 26.55 ms where a run's calls took
20.0 / 21.9 / 29.7 (results/fast section 26): wide calls cost relatively more than the table said, so trees came
out too wide. `StepSizer` therefore corrects the table by what the run's own calls cost (`CallCosts`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from .cost_table import CostTable


@dataclass(frozen=True)
class HostCost:
    """Host seconds of one step beside the graph call: building the tree, the bias, verifying, committing."""

    fixed: float = 0.0  # per step, whatever the tree
    per_slot: float = 0.0  # per slot of the call

    def seconds(self, slots: int) -> float:
        return self.fixed + self.per_slot * slots


@dataclass(frozen=True)
class TreeSize:
    candidates: int  # draft candidates to keep (the root not counted)
    slots: int  # slots the tree fills (root, candidates and the mask slots that come with them)
    width: int  # the graph width to call: the narrowest in the cost table that holds `slots`
    expected_tokens: float  # 1 + the kept candidates' acceptance probabilities
    seconds: float  # the call's cost plus host seconds

    @property
    def tokens_per_s(self) -> float:
        return self.expected_tokens / self.seconds


def size_tree(scores: np.ndarray, costs: CostTable, slots_per_candidate: int = 1, fixed_slots: int = 1,
              host: HostCost | None = None, min_candidates: int = 0) -> TreeSize:
    """The tree size with the most expected tokens per second.

    scores: each candidate's estimated probability of being accepted (any order; values in [0, 1]).
    slots_per_candidate: slots a candidate takes (1, or k + 1 when every node carries k mask slots).
    fixed_slots: slots every tree has (the root, and its mask slots).
    min_candidates: keep at least this many where the scores and the widest graph allow (exploration).
    Ties go to the smaller tree.
    """
    host = host or HostCost()
    if slots_per_candidate < 1 or fixed_slots < 1:
        raise ValueError(f"slots per candidate and fixed slots must be >= 1, got {slots_per_candidate}, "
                         f"{fixed_slots}")
    scores = np.asarray(scores, dtype=np.float64).reshape(-1)
    if scores.size and (not np.isfinite(scores).all() or scores.min() < 0 or scores.max() > 1):
        raise ValueError("candidate scores are acceptance probabilities: finite values in [0, 1]")
    widths = sorted(costs.seconds)
    if fixed_slots > widths[-1]:
        raise ValueError(f"a tree of {fixed_slots} fixed slots fits no width of the cost table ({widths})")
    gains = np.concatenate([[0.0], np.cumsum(np.sort(scores)[::-1])])  # gains[n]: the n best candidates
    most = min(scores.size, (widths[-1] - fixed_slots) // slots_per_candidate)
    best: TreeSize | None = None
    for n in range(min(min_candidates, most), most + 1):
        slots = fixed_slots + n * slots_per_candidate
        width = next(w for w in widths if w >= slots)
        size = TreeSize(n, slots, width, 1.0 + float(gains[n]), costs.seconds[width] + host.seconds(slots))
        if best is None or size.tokens_per_s > best.tokens_per_s * (1 + 1e-12):
            best = size
    return best


class CallCosts:
    """The cost table, corrected by the calls a run makes: per width, a running mean of (call seconds / table
    seconds), each call's ratio clipped to `bounds` so that one burst of load does not resize every tree. A width
    not called yet takes the ratio of the nearest narrower width that was (1 if none): the causes (load, cold
    caches, a smaller context bucket) reach every width. Its first call averages from that carried ratio, not
    from 1: with a table measured under load at twice what the run's calls took, a width-4 call's first
    observation used to put it back at 0.95x the table (2x its cost), and sized chains never called it again
    (results/fast section 38). A flat table is not corrected: it is an assumption asked for (`--cost-model
    flat`: trees fill the widest graph), not a measurement."""

    def __init__(self, table: CostTable, decay: float = 0.9, bounds: tuple[float, float] = (0.5, 2.0)) -> None:
        self.table, self.decay, self.bounds = table, decay, bounds
        self.ratios: dict[int, float] = {}  # width -> running mean ratio, for the widths called so far
        self.current = table

    def observe(self, width: int, seconds: float) -> None:
        if self.table.origin == "flat" or width not in self.table.seconds or not seconds > 0:
            return
        ratio = min(max(seconds / self.table.seconds[width], self.bounds[0]), self.bounds[1])
        carried = self.current.seconds[width] / self.table.seconds[width]
        self.ratios[width] = self.decay * self.ratios.get(width, carried) + (1 - self.decay) * ratio
        corrected, ratio = {}, 1.0
        for w in sorted(self.table.seconds):
            ratio = self.ratios.get(w, ratio)
            corrected[w] = self.table.seconds[w] * ratio
        self.current = self.table.with_seconds(corrected)


class StepSizer:
    """A drafter's per-step sizing: the cost table, plus what the steps so far taught.

    - host seconds per step, a running mean of (step time - graph time), go into every choice; a step is timed
      from one `size` call to the next, so everything the loop does between two graph calls counts;
    - candidate scores are scaled by a calibration, (accepted drafts + prior) / (predicted drafts + prior),
      since a drafter's scores (a mask's softmax, Laplace-smoothed lookup rates) can be over- or underconfident;
    - the table's seconds are corrected by the calls made so far (`CallCosts`);
    - predicted vs achieved tokens per second are kept for the run's stats;
    - after `explore_every` steps in a row that had candidates and kept none, one step keeps the best tree of at
      least one candidate (see the module docstring); 0 = never.

    Call `size` once per step before the graph call and `observe` after it.
    """

    def __init__(self, costs: CostTable, prior: float = 2.0, host_decay: float = 0.9,
                 clock: Callable[[], float] = time.perf_counter, explore_every: int = 32) -> None:
        if explore_every < 0:
            raise ValueError(f"explore_every is a number of steps >= 0 (0 = never explore), got {explore_every}")
        self.costs = costs
        self.call_costs = CallCosts(costs)
        self.explore_every = explore_every
        self.idle_steps = 0  # steps in a row that had candidates and kept none
        self.explored = 0
        self.host = HostCost()
        self.host_decay = host_decay
        self.clock = clock
        self.predicted_drafts, self.accepted_drafts = prior, prior
        self.predicted_tokens = self.predicted_seconds = 0.0
        self.achieved_tokens, self.achieved_seconds, self.steps = 0, 0.0, 0
        self._pending_drafts = 0.0
        self._pending_width: int | None = None  # the width the current step's `size` chose
        self._started: float | None = None  # when the current step's `size` ran
        self._observed: tuple[int, float] | None = None  # (accepted, graph seconds) of that step

    @property
    def calibration(self) -> float:
        return self.accepted_drafts / self.predicted_drafts

    def size(self, scores: np.ndarray, slots_per_candidate: int = 1, fixed_slots: int = 1) -> TreeSize:
        now = self.clock()
        if self._started is not None and self._observed is not None:
            self._record_step(*self._observed, now - self._started)
        self._started, self._observed = now, None
        scores = np.asarray(scores, dtype=np.float64).reshape(-1)
        scaled = np.clip(scores * self.calibration, 0.0, 1.0)
        costs = self.call_costs.current
        size = size_tree(scaled, costs, slots_per_candidate, fixed_slots, self.host)
        if size.candidates == 0 and scores.size and scores.max() > 0:
            self.idle_steps += 1
            if self.explore_every and self.idle_steps >= self.explore_every:
                size = size_tree(scaled, costs, slots_per_candidate, fixed_slots, self.host, min_candidates=1)
                self.explored += size.candidates > 0
        if size.candidates:
            self.idle_steps = 0
        self._pending_drafts = float(np.sort(scores)[::-1][: size.candidates].sum())
        self._pending_width = size.width
        self.predicted_tokens += size.expected_tokens
        self.predicted_seconds += size.seconds
        return size

    def observe(self, accepted: int, graph_seconds: float) -> None:
        """accepted: drafts accepted this step; graph_seconds: its graph call. A step that was not sized (its
        drafter called `size` only when there was room to draft) teaches the calibration and the call costs
        nothing."""
        if self._pending_width is not None:
            self.predicted_drafts += self._pending_drafts
            self.accepted_drafts += accepted
            self.call_costs.observe(self._pending_width, graph_seconds)
        self._pending_drafts, self._pending_width = 0.0, None
        self._observed = (accepted, graph_seconds)

    def _record_step(self, accepted: int, graph_seconds: float, step_seconds: float) -> None:
        host = max(0.0, step_seconds - graph_seconds)
        fixed = host if self.steps == 0 else self.host_decay * self.host.fixed + (1 - self.host_decay) * host
        self.host = HostCost(fixed, self.host.per_slot)
        self.achieved_tokens += accepted + 1
        self.achieved_seconds += step_seconds
        self.steps += 1

    def stats(self) -> dict:
        """Predicted vs achieved tokens per second over the timed steps (for the run's JSON stats)."""
        rate = lambda tokens, seconds: round(tokens / seconds, 3) if seconds > 0 else None  # noqa: E731
        return {"cost_model": self.costs.origin, "predicted_tokens_per_s": rate(self.predicted_tokens,
                                                                                self.predicted_seconds),
                "achieved_tokens_per_s": rate(self.achieved_tokens, self.achieved_seconds),
                "score_calibration": round(self.calibration, 4), "host_s_per_step": round(self.host.fixed, 6),
                "call_cost_ratios": {w: round(r, 4) for w, r in sorted(self.call_costs.ratios.items())},
                "explored_steps": self.explored}

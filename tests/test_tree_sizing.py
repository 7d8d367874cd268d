"""Tree sizing: the tree that maximises expected tokens per second, from candidate probabilities and call costs."""

from __future__ import annotations

import itertools
from types import SimpleNamespace

import numpy as np
import pytest

from mtpedge.runtime.acceptance import DepthRates
from mtpedge.runtime.cost_table import CostTable
from mtpedge.runtime.tree_sizing import HostCost, size_tree


def table(seconds: dict[int, float]) -> CostTable:
    return CostTable(seconds, "m", "0" * 64, 64, "test", "test")


FLAT = table({1: 0.01, 4: 0.01, 16: 0.01, 64: 0.01})
CPU = table({1: 0.010, 4: 0.012, 16: 0.020, 64: 0.057})  # shaped like this machine's calls: wide calls cost more


def test_a_flat_table_grows_the_tree_to_the_widest_graph():
    scores = np.full(100, 0.05)
    size = size_tree(scores, FLAT)
    assert (size.width, size.candidates, size.slots) == (64, 63, 64)
    assert size.expected_tokens == pytest.approx(1 + 63 * 0.05)


def test_on_a_cpu_table_weak_candidates_are_not_worth_a_wider_call():
    assert size_tree(np.full(100, 0.05), CPU).width == 1  # 16 slots of 5% do not pay for a 2x call
    assert size_tree(np.full(100, 0.05), CPU).candidates == 0
    strong = np.array([0.9, 0.8, 0.7, 0.05, 0.05])
    size = size_tree(strong, CPU)
    assert (size.width, size.candidates) == (4, 3)  # three good candidates fit the width-4 graph


def test_the_choice_is_the_best_over_every_tree_size():
    rng = np.random.default_rng(0)
    for _ in range(200):
        scores = rng.random(rng.integers(0, 40)) ** 3
        spc, fixed = int(rng.integers(1, 4)), int(rng.integers(1, 4))
        host = HostCost(float(rng.random() * 0.005), float(rng.random() * 0.0005))
        size = size_tree(scores, CPU, spc, fixed, host)
        best = -1.0
        ranked = np.sort(scores)[::-1]
        for n in itertools.count():
            slots = fixed + n * spc
            if n > scores.size or slots > 64:
                break
            cost = CPU.cost(slots) + host.seconds(slots)
            best = max(best, (1 + ranked[:n].sum()) / cost)
        assert size.tokens_per_s == pytest.approx(best)
        assert size.width == min(w for w in CPU.seconds if w >= size.slots)


def test_host_cost_per_slot_shrinks_the_tree():
    scores = 0.9 ** np.arange(1, 64)  # each candidate adds less than the one before
    assert size_tree(scores, FLAT).candidates == 63
    assert 0 < size_tree(scores, FLAT, host=HostCost(per_slot=0.001)).candidates < 63


def test_mask_slots_come_with_each_candidate():
    size = size_tree(np.full(40, 0.5), FLAT, slots_per_candidate=2, fixed_slots=2)  # k = 1 mask per node
    assert (size.slots, size.candidates) == (64, 31)


def test_depth_rates_give_chain_scores():
    rates = DepthRates(4)
    rates.record(np.array([1, 1, 2]), np.array([True, True, True]), np.array([True, False, False]))
    chain = rates.chain_scores(4)
    assert size_tree(chain, FLAT).candidates == 4
    assert np.all(np.diff(chain) <= 0)


@pytest.mark.parametrize("scores, kwargs, match", [
    (np.array([1.5]), {}, r"in \[0, 1\]"),
    (np.array([np.nan]), {}, r"in \[0, 1\]"),
    (np.array([0.5]), {"slots_per_candidate": 0}, ">= 1"),
    (np.array([0.5]), {"fixed_slots": 65}, "fits no width"),
])
def test_bad_input_is_named(scores, kwargs, match):
    with pytest.raises(ValueError, match=match):
        size_tree(scores, CPU, **kwargs)


def test_step_sizer_learns_calibration_and_host_cost_and_reports_both_rates():
    from mtpedge.runtime.tree_sizing import StepSizer

    now = [0.0]
    sizer = StepSizer(CPU, clock=lambda: now[0])
    scores = np.array([0.9, 0.9, 0.9])
    size = sizer.size(scores)
    assert size.candidates == 3  # believed: three likely drafts pay for the width-4 call
    for _ in range(20):  # but nothing is ever accepted, and the host takes 5 ms a step beside the call
        graph = CPU.cost(size.width)
        now[0] += graph + 0.005
        sizer.observe(0, graph)
        size = sizer.size(scores)
    assert sizer.calibration < 0.2 and sizer.host.fixed == pytest.approx(0.005)
    assert size.candidates == 0  # the overconfident drafter is sized down to plain calls
    stats = sizer.stats()
    assert 1 / (CPU.cost(4) + 0.005) < stats["achieved_tokens_per_s"] < 1 / (CPU.cost(1) + 0.005)
    assert stats["predicted_tokens_per_s"] > stats["achieved_tokens_per_s"] and stats["cost_model"] == "test"


def test_step_sizer_on_a_flat_table_keeps_the_widest_tree():
    from mtpedge.runtime.tree_sizing import StepSizer

    sizer = StepSizer(FLAT)
    for _ in range(10):
        size = sizer.size(np.full(80, 0.3))
        sizer.observe(2, 0.01)
        assert size.width == 64


def test_a_sizer_that_never_drafts_explores_and_learns_that_drafts_pay():
    """Estimates below what a wider call costs would keep a sizer at width 1 for good (results/fast section 15):
    after explore_every idle steps it drafts once, and accepted drafts raise its calibration until drafting pays."""
    from mtpedge.runtime.tree_sizing import StepSizer

    sizer = StepSizer(CPU, prior=2.0, explore_every=4)
    sizer.predicted_drafts = 20.0  # an earlier bad stretch: calibration 0.1
    scores = np.array([0.5, 0.25, 0.125])  # the prior's chain, which pays only at calibration ~1
    kept = []
    for _ in range(40):
        size = sizer.size(scores)
        kept.append(size.candidates)
        sizer.observe(size.candidates, CPU.cost(size.width))  # every draft is accepted
    assert kept[:4] == [0, 0, 0, 3]  # three idle steps, then the best tree with a candidate
    assert kept[-5:] == [3] * 5  # the calibration has learned that they pay
    assert sizer.stats()["explored_steps"] >= 1


def test_exploring_where_drafts_never_pay_costs_one_call_in_explore_every():
    from mtpedge.runtime.tree_sizing import StepSizer

    sizer = StepSizer(CPU, explore_every=8)
    kept = []
    for _ in range(64):
        size = sizer.size(np.array([0.1, 0.05]))  # 1.15 tokens do not pay for a 1.2x call
        kept.append(size.candidates)
        sizer.observe(0, CPU.cost(size.width))
    assert sum(k > 0 for k in kept) == 8 and kept[7] > 0 and kept[0] == 0
    never = StepSizer(CPU, explore_every=0)
    assert all(never.size(np.array([0.1, 0.05])).candidates == 0 for _ in range(64))
    assert StepSizer(CPU).size(np.zeros(0)).candidates == 0  # nothing to explore with


@pytest.mark.parametrize("every", [-1])
def test_a_negative_explore_every_is_refused(every):
    from mtpedge.runtime.tree_sizing import StepSizer

    with pytest.raises(ValueError, match="explore_every"):
        StepSizer(CPU, explore_every=every)


def test_a_run_whose_wide_calls_cost_more_than_the_table_says_shrinks_its_trees():
    """The table is measured once in a tight loop; a run's wide calls cost relatively more (results/fast section
    26). Sized from what the calls cost, three drafts of 0.3 stop paying for a width-4 call that takes 2.4x a
    width-1 call, though the table says 1.2x."""
    from mtpedge.runtime.tree_sizing import StepSizer

    actual = {1: 0.010, 4: 0.024, 16: 0.040, 64: 0.100}
    sizer = StepSizer(CPU, explore_every=0)
    scores = np.array([0.3, 0.3, 0.3])
    widths = []
    for _ in range(30):
        size = sizer.size(scores)
        widths.append(size.width)
        sizer.observe(1 if size.candidates else 0, actual[size.width])  # a third of the drafts accepted
    assert widths[0] == 4 and widths[-1] == 1
    assert sizer.call_costs.current.seconds[4] > 1.5 * CPU.seconds[4]
    assert sizer.stats()["call_cost_ratios"][4] > 1.5


def test_call_costs_follow_the_calls_made_clip_a_burst_and_carry_to_widths_not_called():
    from mtpedge.runtime.tree_sizing import CallCosts

    costs = CallCosts(CPU, decay=0.9)
    costs.observe(4, 10 * CPU.seconds[4])  # one call in a burst of load: clipped to 2x before it counts
    assert costs.ratios[4] == pytest.approx(0.9 + 0.1 * 2.0)
    for _ in range(200):
        costs.observe(1, 1.5 * CPU.seconds[1])
    assert costs.current.seconds[1] == pytest.approx(1.5 * CPU.seconds[1])
    assert costs.current.seconds[4] == pytest.approx(1.1 * CPU.seconds[4])  # called once: its own ratio
    assert costs.current.seconds[16] == pytest.approx(1.1 * CPU.seconds[16])  # never called: the narrower one's
    costs.observe(8, 1.0)  # a width the table lacks, and a call that took no time, teach nothing
    costs.observe(1, 0.0)
    assert sorted(costs.ratios) == [1, 4] and costs.current.origin == CPU.origin
    flat = CallCosts(CostTable.flat(SimpleNamespace(graphs=[SimpleNamespace(kind="decode", width=w) for w in (1, 16)],
                                                    model_name="m", source_sha256="0" * 64, context=64)))
    flat.observe(16, 5.0)  # asked for, not measured: a flat table stays flat
    assert flat.current.seconds == {1: 1.0, 16: 1.0} and not flat.ratios


def test_a_width_called_first_late_starts_from_the_ratio_it_carried_not_from_the_table():
    """A table measured under load reads every call at twice what the run's take (results/fast section 38): once
    width-1 calls have taught that, a width-4 call's first observation keeps it at half the table instead of
    putting it back near the table's figure, which made it look 2x too dear and kept chains short."""
    from mtpedge.runtime.tree_sizing import CallCosts

    costs = CallCosts(CPU, decay=0.9)
    for _ in range(100):
        costs.observe(1, 0.5 * CPU.seconds[1])
    assert costs.current.seconds[4] == pytest.approx(0.5 * CPU.seconds[4], rel=1e-3)  # carried before its first call
    costs.observe(4, 0.5 * CPU.seconds[4])
    assert costs.current.seconds[4] == pytest.approx(0.5 * CPU.seconds[4], rel=1e-3)  # was 0.95x the table
    assert costs.current.seconds[16] == pytest.approx(0.5 * CPU.seconds[16], rel=1e-3)


def test_a_step_that_was_not_sized_teaches_the_sizer_nothing():
    from mtpedge.runtime.tree_sizing import StepSizer

    sizer = StepSizer(CPU)
    sizer.size(np.array([0.9]))
    sizer.observe(1, CPU.seconds[4])
    ratios, calibration = dict(sizer.call_costs.ratios), sizer.calibration
    sizer.observe(3, 1.0)  # a step whose drafter had no room to draft (carried drafts filled it): no size call
    assert sizer.call_costs.ratios == ratios and sizer.calibration == calibration

"""Golden cases for the Java port of cost-aware tree sizing: size_tree over assorted cost tables, StepSizer runs
with a scripted clock, and cost tables read from their JSON form (and checked against a bundle's manifest)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
from golden_common import write
from mtpedge.runtime.cost_table import CostTable, CostTableError
from mtpedge.runtime.tree_sizing import HostCost, StepSizer, size_tree

TABLES = [{1: 1.0, 8: 1.0, 16: 1.0},  # flat: an NPU
          {1: 0.0112, 16: 0.0201, 64: 0.0612},  # a CPU: a wide call costs several narrow ones
          {1: 0.004, 4: 0.0041, 8: 0.009, 16: 0.0095, 32: 0.03}]


def table(seconds: dict[int, float], origin: str = "golden") -> CostTable:
    return CostTable(seconds, "golden", "0" * 64, 64, "golden", origin)


def size_json(size) -> dict:
    return {"candidates": size.candidates, "slots": size.slots, "width": size.width,
            "expected_tokens": size.expected_tokens, "seconds": size.seconds}


def scores(rng: np.random.Generator, count: int) -> np.ndarray:
    """Acceptance estimates with deliberate repeats (ties) and the ends of [0, 1]."""
    values = rng.uniform(0, 1, size=count) ** 2
    values[rng.random(count) < 0.2] = 0.25
    values[rng.random(count) < 0.05] = 0.0
    values[rng.random(count) < 0.05] = 1.0
    return values


def size_cases(rng: np.random.Generator) -> list:
    cases = []
    for _ in range(60):
        seconds = TABLES[int(rng.integers(len(TABLES)))]
        spc, fixed = int(rng.integers(1, 5)), int(rng.integers(1, 5))
        host = HostCost(float(rng.choice([0.0, 0.002, 0.01])), float(rng.choice([0.0, 0.0001])))
        s = scores(rng, int(rng.integers(0, 20)))
        size = size_tree(s, table(seconds), spc, fixed, host)
        cases.append({"seconds": {str(w): v for w, v in seconds.items()}, "scores": s.tolist(),
                      "slots_per_candidate": spc, "fixed_slots": fixed, "host_fixed": host.fixed,
                      "host_per_slot": host.per_slot, "size": size_json(size)})
    return cases


def sizer_runs(rng: np.random.Generator) -> list:
    """Whole StepSizer runs: each step sizes a candidate list at a scripted time, then observes its outcome."""
    runs = []
    # short runs: explore often enough to show; the flat table is not corrected by the calls (CallCosts)
    for seconds, explore_every, origin in zip(TABLES, (32, 3, 5), ("flat", "measured", "measured"), strict=True):
        times: list[float] = []
        now = 0.0
        sizer = StepSizer(table(seconds, origin), clock=lambda times=times: times[-1], explore_every=explore_every)
        spc, fixed = int(rng.integers(1, 4)), int(rng.integers(1, 3))
        steps = []
        for _ in range(30):
            now += float(rng.uniform(0.001, 0.05))
            times.append(now)
            s = scores(rng, int(rng.integers(0, 12)))
            size = sizer.size(s, spc, fixed)
            accepted = int(rng.integers(0, size.candidates + 1))
            graph = float(rng.uniform(0.0005, 0.03))
            sizer.observe(accepted, graph)
            steps.append({"time": now, "scores": s.tolist(), "size": size_json(size), "accepted": accepted,
                          "graph_seconds": graph, "calibration": sizer.calibration, "host_fixed": sizer.host.fixed,
                          "call_seconds": {str(w): v for w, v in sizer.call_costs.current.seconds.items()}})
        runs.append({"seconds": {str(w): v for w, v in seconds.items()}, "origin": origin, "explore_every": explore_every,
                     "explored_steps": sizer.explored, "slots_per_candidate": spc,
                     "fixed_slots": fixed, "steps": steps,
                     "predicted_tokens": sizer.predicted_tokens, "predicted_seconds": sizer.predicted_seconds,
                     "achieved_tokens": sizer.achieved_tokens, "achieved_seconds": sizer.achieved_seconds})
    return runs


def table_cases(manifest_json: dict) -> dict:
    """Cost table files as read (or refused), and checked against the tiny bundle's manifest."""
    good = table({1: 0.01, 8: 0.02, 16: 0.05}).to_json()
    good["bundle"]["source_sha256"] = manifest_json["source_sha256"]
    texts = [json.dumps(good),
             json.dumps({**good, "seconds": {"1": 0.01, "8": 0.02}}),
             json.dumps({**good, "bundle": {**good["bundle"], "source_sha256": "f" * 64, "model_name": "other"}}),
             json.dumps({**good, "format": "something-else"}),
             json.dumps({**good, "version": 2}),
             json.dumps({**good, "seconds": {"1": -1.0}}),
             json.dumps({key: value for key, value in good.items() if key != "bundle"}),
             "[1, 2]"]
    graphs = [SimpleNamespace(kind=g["kind"], width=g["width"]) for g in manifest_json["graphs"]]
    manifest = SimpleNamespace(source_sha256=manifest_json["source_sha256"], model_name=manifest_json["model_name"],
                               context=manifest_json["context"], graphs=graphs)
    cases = []
    for text in texts:
        try:
            parsed = CostTable.from_json(json.loads(text))
        except CostTableError as err:
            cases.append({"text": text, "error": str(err)})
            continue
        cases.append({"text": text, "seconds": {str(w): s for w, s in sorted(parsed.seconds.items())},
                      "check": parsed.check(manifest)})
    flat = CostTable.flat(manifest)
    return {"manifest": "manifest_tiny.json", "cases": cases,
            "flat": {str(w): s for w, s in sorted(flat.seconds.items())}}


def write_all(manifest_json: dict) -> None:
    rng = np.random.default_rng(11)
    write("sizing.json", {"size_tree": size_cases(rng), "step_sizer": sizer_runs(rng),
                          "cost_tables": table_cases(manifest_json)})

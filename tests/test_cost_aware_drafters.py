"""Drafters that size their trees from the engine's cost table stay lossless, grow on a flat table and shrink
where wide calls cost more than their candidates are worth."""

from __future__ import annotations

import numpy as np
import pytest

from mtpedge.runtime.cost_table import CostTable, decode_widths
from mtpedge.runtime.drafters import make_drafter
from mtpedge.runtime.engine import Engine
from mtpedge.runtime.generate import generate


@pytest.fixture(scope="module")
def engine(tiny_bundle):
    return Engine.load(tiny_bundle("llama"), threads=1)


def table(engine: Engine, cost) -> CostTable:
    m = engine.manifest
    return CostTable({w: cost(w) for w in decode_widths(m)}, m.model_name, m.source_sha256, m.context, "t", "test")


def prompts(engine: Engine, count: int = 4) -> list[list[int]]:
    rng = np.random.default_rng(7)
    out = []
    for _ in range(count):
        start = rng.integers(0, engine.config.vocab_size, size=10).tolist()
        out.append(start + start + start[:4])  # repeats: lookup has candidates
    return out


def run(engine: Engine, spec: str, costs: CostTable | None, prompt: list[int]):
    engine.cost_table = costs
    try:
        return generate(engine, prompt, 40, stop_token_ids=set(), drafter=make_drafter(spec, engine))
    finally:
        engine.cost_table = None


@pytest.mark.parametrize("spec", ["lookup", "lookup:width=32", "hybrid:width=32"])
def test_sized_drafters_stay_lossless_on_any_cost_table(engine, spec):
    steep = table(engine, lambda w: 0.001 * w)
    flat = table(engine, lambda w: 0.001)
    for prompt in prompts(engine):
        plain = generate(engine, prompt, 40, stop_token_ids=set()).token_ids
        for costs in (steep, flat):
            result = run(engine, spec, costs, prompt)
            assert result.token_ids == plain
            sizing = result.stats.sizing
            assert sizing["cost_model"] == "test" and sizing["predicted_tokens_per_s"] > 0
            assert sizing["achieved_tokens_per_s"] > 0


def test_a_flat_table_keeps_the_full_trees_and_a_steep_one_shrinks_them(engine):
    very_steep = table(engine, lambda w: 1.0 if w == 1 else 1000.0)  # nothing is worth a wider call
    flat = CostTable.flat(engine.manifest)  # `--cost-model flat`: an assumption, not corrected by the calls' times
    for prompt in prompts(engine):
        unsized = generate(engine, prompt, 40, stop_token_ids=set(), drafter=make_drafter("lookup", engine)).stats
        assert run(engine, "lookup", flat, prompt).stats.decode_calls == unsized.decode_calls
        shrunk = run(engine, "lookup", very_steep, prompt).stats
        assert shrunk.tokens_per_call == 1.0 and unsized.tokens_per_call > 1.0  # every step a plain call
    assert generate(engine, prompts(engine)[0], 8, stop_token_ids=set()).stats.sizing is None


def test_generate_cost_model_option_reaches_the_stats_and_a_bad_file_falls_back(tiny_bundle, tmp_path, monkeypatch,
                                                                                 capsys):
    import json

    from mtpedge.main import main

    monkeypatch.setenv("MTPEDGE_CACHE", str(tmp_path / "cache"))
    bundle = str(tiny_bundle("llama"))
    base = ["generate", "The quick brown fox. The quick brown fox.", "--bundle", bundle, "--max-new-tokens", "12",
            "--json", "--drafter", "lookup"]
    assert main([*base, "--cost-model", "flat"]) == 0
    stats = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert stats["sizing"]["cost_model"] == "flat" and stats["lossless"]
    assert stats["sizing"]["predicted_tokens_per_s"] > 0 and stats["sizing"]["achieved_tokens_per_s"] > 0
    assert main([*base]) == 0  # measured, then cached under MTPEDGE_CACHE
    stats = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert stats["sizing"]["cost_model"] == "measured" and list((tmp_path / "cache" / "costs").glob("*.json"))
    (tmp_path / "other.json").write_text(json.dumps({"format": "mtpedge-cost-table", "version": 1,
                                                     "bundle": {"model_name": "x", "source_sha256": "0" * 64,
                                                                "context": 8}, "seconds": {"1": 0.1}}))
    assert main([*base, "--cost-model", str(tmp_path / "other.json")]) == 0
    captured = capsys.readouterr()
    assert "made for x" in captured.err and "measured on this machine instead" in captured.err
    assert json.loads(captured.out.strip().splitlines()[-1])["sizing"]["cost_model"] == "measured"
    assert main(["generate", "hi", "--bundle", bundle, "--max-new-tokens", "4", "--json", "--drafter", "none"]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["sizing"] is None  # plain: nothing sized

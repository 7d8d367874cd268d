"""Context buckets: a bundle with graphs for smaller contexts decodes exactly as its full-context graphs do."""

from __future__ import annotations

import numpy as np
import pytest

from mtpedge.export.bundle_writer import ExportConfig, export_bundle
from mtpedge.runtime.bundle import BundleError, read_manifest
from mtpedge.runtime.drafters import make_drafter
from mtpedge.runtime.engine import Engine
from mtpedge.runtime.generate import generate

CONTEXT, BUCKETS = 128, (32, 64)


@pytest.fixture(scope="module")
def bundles(tiny_model_dir, tmp_path_factory):
    """The same tiny model exported with buckets and without."""
    out = {}
    for name, buckets in (("bucketed", BUCKETS), ("full", ())):
        config = ExportConfig(context=CONTEXT, prefill_width=16, decode_widths=(1, 8), context_buckets=buckets)
        out[name] = export_bundle(tiny_model_dir("llama"), tmp_path_factory.mktemp(name) / "b", config)
    return out


def test_every_kind_and_width_comes_in_every_bucket(bundles):
    manifest = read_manifest(bundles["bucketed"])
    assert manifest.context_buckets == [32, 64, 128]
    assert sorted((g.context, g.kind, g.width) for g in manifest.graphs) == sorted(
        (c, k, w) for c in (32, 64, 128) for k, w in (("prefill", 16), ("decode", 1), ("decode", 8)))
    assert all(p["argmax_agree"] == 1.0 for p in manifest.extras["export_parity"].values())


def test_plain_decoding_through_buckets_equals_the_full_context_token_for_token(bundles):
    bucketed, full = Engine.load(bundles["bucketed"]), Engine.load(bundles["full"])
    rng = np.random.default_rng(3)
    for prompt_len in (5, 20, 40, 70):  # starting in each bucket; every run crosses into the next ones
        prompt = rng.integers(0, full.config.vocab_size, size=prompt_len).tolist()
        want = generate(full, prompt, CONTEXT - prompt_len - 1, stop_token_ids=set())
        got = generate(bucketed, prompt, CONTEXT - prompt_len - 1, stop_token_ids=set())
        assert got.token_ids == want.token_ids
        assert bucketed.cache.capacity == CONTEXT  # it moved up to the last bucket
    bucketed.reset()
    assert bucketed.cache.capacity == BUCKETS[0]


def test_the_smallest_bucket_that_holds_the_block_runs(bundles):
    engine = Engine.load(bundles["bucketed"])
    engine.prefill(list(range(20)))
    assert engine.cache.capacity == 32
    used = []
    run = engine.graphs.run
    engine.graphs.run = lambda entry, feeds, n: used.append(entry.name) or run(entry, feeds, n)
    engine.run_block(engine.embed(np.arange(8)), np.arange(-1, 7))  # 20 + 8 <= 32
    engine.run_block(engine.embed(np.arange(8)), np.arange(-1, 7))
    engine.cache.n_past = 30
    engine.run_block(engine.embed(np.arange(8)), np.arange(-1, 7))  # 30 + 8 > 32: up to 64, rows copied
    assert used == ["decode_ar8_cl32", "decode_ar8_cl32", "decode_ar8_cl64"]


def test_a_lazy_engine_creates_only_the_sessions_a_request_can_reach_before_its_clock_starts(bundles):
    # `mtpedge generate` (one answer) loads the engine lazily: the default bundle's 15 sessions took ~0.5 s of a
    # 1.2 s start (results/fast section 39); chat, serve and bench keep eager engines
    eager = Engine.load(bundles["bucketed"])
    lazy = Engine.load(bundles["bucketed"], eager=False)
    assert not lazy.graphs._sessions and len(eager.graphs._sessions) == 9
    prompt = list(range(3, 13))
    sessions_at_call = []  # how many sessions exist at each graph call: all are created before the first
    run = lazy.graphs.run
    lazy.graphs.run = lambda entry, feeds, n: sessions_at_call.append(len(lazy.graphs._sessions)) or run(entry,
                                                                                                           feeds, n)
    short = generate(lazy, prompt, 6, stop_token_ids=set(), drafter=make_drafter("lookup", lazy))
    assert short.token_ids == generate(eager, prompt, 6, stop_token_ids=set()).token_ids
    # 10 + 6 + the widest graph (16) fit the 32 bucket: its three graphs, nothing of 64 or 128
    assert sorted(lazy.graphs._sessions) == ["decode_ar1_cl32", "decode_ar8_cl32", "prefill_ar16_cl32"]
    assert set(sessions_at_call) == {3}
    lazy.reset()
    sessions_at_call.clear()
    longer = generate(lazy, prompt, 30, stop_token_ids=set())  # 10 + 30 + 16 reach the 64 bucket, not 128
    assert longer.token_ids == generate(eager, prompt, 30, stop_token_ids=set()).token_ids
    assert set(sessions_at_call) == {6} and not any(name.endswith("cl128") for name in lazy.graphs._sessions)


def test_drafters_stay_lossless_through_buckets(bundles):
    engine = Engine.load(bundles["bucketed"])
    rng = np.random.default_rng(5)
    for _ in range(3):
        prompt = rng.integers(0, engine.config.vocab_size, size=12).tolist()
        prompt = prompt + prompt  # repeats, so lookup has something to draft
        plain = generate(engine, prompt, 90, stop_token_ids=set())
        for name in ("lookup", "hybrid"):
            drafted = generate(engine, prompt, 90, stop_token_ids=set(), drafter=make_drafter(name, engine, width=8))
            assert drafted.token_ids == plain.token_ids


def test_a_bucket_without_its_full_context_graph_is_refused(bundles, tmp_path):
    import json
    import shutil

    folder = tmp_path / "b"
    shutil.copytree(bundles["bucketed"], folder)
    data = json.loads((folder / "manifest.json").read_text())
    data["graphs"] = [g for g in data["graphs"] if g["name"] != "decode_ar8_cl128"]
    (folder / "manifest.json").write_text(json.dumps(data))
    with pytest.raises(BundleError, match="needs a full-context graph"):
        read_manifest(folder)


def test_buckets_must_lie_between_the_widest_graph_and_the_context():
    with pytest.raises(ValueError, match="context buckets must lie between"):
        ExportConfig(context=128, prefill_width=16, decode_widths=(1, 8), context_buckets=(8,))
    with pytest.raises(ValueError, match="context buckets must lie between"):
        ExportConfig(context=128, prefill_width=16, decode_widths=(1, 8), context_buckets=(128,))

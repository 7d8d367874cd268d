"""A bundle's cost table, measured once per bundle + machine and cached; bad caches fall back with a message."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mtpedge.runtime.cost_measure import cache_file, cost_table_for, measure_cost_table
from mtpedge.runtime.cost_table import decode_widths
from mtpedge.runtime.engine import Engine


@pytest.fixture(scope="module")
def engine(tiny_bundle):
    return Engine.load(tiny_bundle("llama"), threads=1)


def test_measures_every_decode_width_and_leaves_the_engine_as_it_was(engine):
    engine.cache.n_past = 5
    calls = engine.graph_calls
    table = measure_cost_table(engine, repeats=2, warmup=1)
    assert sorted(table.seconds) == decode_widths(engine.manifest)
    assert table.check(engine.manifest) is None and table.origin == "measured"
    assert "onnxruntime" in table.device and "1 threads" in table.device
    assert (engine.cache.n_past, engine.graph_calls) == (5, calls)
    engine.reset()


def test_cached_once_then_read_back_until_refreshed(engine, tmp_path):
    said = []
    first = cost_table_for(engine, tmp_path, say=said.append)
    path = cache_file(engine, tmp_path)
    assert path.is_file() and not said
    assert cost_table_for(engine, tmp_path, say=said.append) == first  # read back: the same figures
    os.utime(path, (0, 0))
    again = cost_table_for(engine, tmp_path, refresh=True, say=said.append)
    assert path.stat().st_mtime > 0 and again.check(engine.manifest) is None and not said
    # `--cost-model remeasure` (generate, chat, serve and bench alike) writes what it measured to the cache: bench's
    # used to keep it in memory, so a table measured under load stayed for every later run (results/fast 37)
    from mtpedge.runtime.cost_measure import cost_table_from_option

    os.utime(path, (0, 0))
    cost_table_from_option(engine, "remeasure", tmp_path, say=said.append)
    assert path.stat().st_mtime > 0 and not said


def test_a_cached_table_measured_under_load_is_measured_again_and_a_slower_machine_keeps_it(engine, tmp_path):
    # the thirtieth session's table, measured under load, read calls ~2x what they took quiet and kept trees short
    from mtpedge.runtime.cost_table import CostTable

    table = cost_table_for(engine, tmp_path, say=print)
    path = cache_file(engine, tmp_path)
    busy = table.with_seconds({w: 10 * s for w, s in table.seconds.items()})
    busy.save(path)
    said = []
    again = cost_table_for(engine, tmp_path, say=said.append)
    assert "is stale" in said[0] and "measured while the machine was busier" in said[0] and "measuring again" in said[0]
    assert max(again.seconds.values()) < 5 * max(table.seconds.values())
    assert CostTable.load(path) == again  # the quieter measurement replaced it in the cache
    quiet = table.with_seconds({w: s / 2 for w, s in table.seconds.items()})
    quiet.save(path)  # calls slower now than the table says: this run may be the busy one, the table stays
    said.clear()
    assert cost_table_for(engine, tmp_path, say=said.append) == quiet and not said


def test_a_corrupt_or_foreign_cache_file_is_measured_again(engine, tmp_path):
    path = cache_file(engine, tmp_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("{not json")
    said = []
    table = cost_table_for(engine, tmp_path, say=said.append)
    assert table.check(engine.manifest) is None
    assert "not readable JSON" in said[0] and "measuring again" in said[0]


def test_an_unwritable_cache_folder_measures_in_memory_with_a_message(engine, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("a file where the cache folder should be")
    said = []
    table = cost_table_for(engine, blocker / "costs", say=said.append)
    assert table.check(engine.manifest) is None
    assert "measured in memory" in said[0] and "MTPEDGE_CACHE" in said[0]


def test_cost_model_option_flat_measured_or_a_file(engine, tmp_path):
    from mtpedge.runtime.cost_measure import cost_table_from_option
    from mtpedge.runtime.cost_table import CostTable

    said = []
    assert cost_table_from_option(engine, "flat", tmp_path, say=said.append).origin == "flat"
    assert cost_table_from_option(engine, "measured", tmp_path, say=said.append).origin == "measured"
    m = engine.manifest
    mine = CostTable({w: 0.01 * w for w in decode_widths(m)}, m.model_name, m.source_sha256, m.context, "npu", "x")
    mine.save(tmp_path / "mine.json")
    assert cost_table_from_option(engine, str(tmp_path / "mine.json"), tmp_path, say=said.append) == mine
    assert not said
    CostTable({1: 0.01}, "other", "f" * 64, 64, "d", "x").save(tmp_path / "other.json")
    CostTable({1: 0.01}, m.model_name, m.source_sha256, m.context, "d", "x").save(tmp_path / "partial.json")
    for name, words in (("other.json", "made for other"), ("partial.json", "lacks the bundle's decode widths"),
                        ("missing.json", "does not exist")):
        said.clear()
        table = cost_table_from_option(engine, str(tmp_path / name), tmp_path, say=said.append)
        assert table.origin == "measured" and table.check(m) is None  # decoding goes on with a measured table
        assert words in said[0] and "measured on this machine instead" in said[0]


def test_a_bundle_with_a_single_decode_width_is_named(tiny_model_dir, tmp_path):
    from mtpedge.export.bundle_writer import ExportConfig, export_bundle
    from mtpedge.runtime.cost_measure import cost_table_from_option

    folder = export_bundle(tiny_model_dir("llama"), tmp_path / "one", ExportConfig(
        context=64, prefill_width=8, decode_widths=(1,), check_parity=False))
    said = []
    engine = Engine.load(folder, threads=1)
    table = cost_table_from_option(engine, "measured", tmp_path / "costs", say=said.append)
    assert sorted(table.seconds) == [1] and "single decode width" in said[0] and "--decode-widths" in said[0]
    from mtpedge.runtime.drafters import DEFAULT_DRAFTER, make_drafter
    from mtpedge.runtime.generate import generate

    engine.cost_table = table  # the default drafter still decodes (one-slot calls), as plain decoding does
    prompt = [1, 2, 3, 1, 2, 3, 1, 2]
    plain = generate(engine, prompt, 12, stop_token_ids=set())
    drafted = generate(engine, prompt, 12, stop_token_ids=set(), drafter=make_drafter(DEFAULT_DRAFTER, engine))
    assert drafted.token_ids == plain.token_ids and drafted.stats.tokens_per_call == 1.0


def test_measuring_a_bucketed_bundle_runs_the_full_context_graphs(tiny_model_dir, tmp_path):
    from mtpedge.export.bundle_writer import ExportConfig, export_bundle

    folder = export_bundle(tiny_model_dir("llama"), tmp_path / "b", ExportConfig(
        context=64, context_buckets=(32,), prefill_width=16, decode_widths=(1, 8), check_parity=False))
    engine = Engine.load(folder, threads=1)
    used = []
    run = engine.graphs.run
    engine.graphs.run = lambda entry, feeds, n: used.append(entry.name) or run(entry, feeds, n)
    table = measure_cost_table(engine, repeats=1, warmup=0)
    assert sorted(table.seconds) == [1, 8] and used == ["decode_ar1_cl64", "decode_ar8_cl64"]
    assert engine.cache.n_past == 0


def test_sessions_stop_spinning_after_a_run_unless_the_caller_says_otherwise(tiny_bundle):
    # a drafter's steps switch widths, and one width's spinning workers slowed the next width's call ~2x at
    # 2 threads (runtime/graphs.SESSION_DEFAULTS); a caller's own session options still win
    engine = Engine.load(tiny_bundle("llama"), threads=2)
    entry = engine.graphs.entries[0]
    assert engine.graphs.session(entry).get_session_options().get_session_config_entry(
        "session.force_spinning_stop") == "1"
    spinning = Engine.load(tiny_bundle("llama"), threads=2, session_options={"session.force_spinning_stop": "0"})
    assert spinning.graphs.session(entry).get_session_options().get_session_config_entry(
        "session.force_spinning_stop") == "0"
    # the option is part of the machine description, so tables measured with another setting are not reused
    assert "session.force_spinning_stop=1" in measure_cost_table(engine, repeats=1, warmup=0).device
    assert cache_file(engine, Path("c")) != cache_file(spinning, Path("c"))

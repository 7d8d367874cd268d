"""A bundle's cost table, measured once per bundle + machine and cached; bad caches fall back with a message."""

from __future__ import annotations

import os

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

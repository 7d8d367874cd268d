"""The cost table: its file form round-trips, and a table for another bundle or missing widths is named."""

from __future__ import annotations

import json

import pytest

from mtpedge.runtime.bundle import read_manifest
from mtpedge.runtime.cost_table import CostTable, CostTableError, decode_widths


def test_round_trip_and_lookup(tiny_bundle, tmp_path):
    manifest = read_manifest(tiny_bundle("llama"))
    widths = decode_widths(manifest)
    table = CostTable({w: 0.001 * w for w in widths}, manifest.model_name, manifest.source_sha256,
                      manifest.context, "test", "measured")
    table.save(tmp_path / "cost.json")
    back = CostTable.load(tmp_path / "cost.json")
    assert back == table and back.check(manifest) is None
    assert back.cost(2) == table.seconds[min(w for w in widths if w >= 2)]
    with pytest.raises(CostTableError, match="holds"):
        back.cost(max(widths) + 1)


def test_mismatches_are_named(tiny_bundle, tmp_path):
    manifest = read_manifest(tiny_bundle("llama"))
    other = CostTable({1: 0.01}, "other", "0" * 64, manifest.context, "test", "measured")
    assert "made for other" in other.check(manifest)
    partial = CostTable({1: 0.01}, manifest.model_name, manifest.source_sha256, manifest.context, "t", "measured")
    assert "lacks the bundle's decode widths" in partial.check(manifest)
    assert CostTable.flat(manifest).check(manifest) is None


@pytest.mark.parametrize("content, match", [
    ("not json", "not readable JSON"),
    (json.dumps({"format": "x"}), "not an mtpedge cost table"),
    (json.dumps({"format": "mtpedge-cost-table", "version": 9}), "version 9"),
    (json.dumps({"format": "mtpedge-cost-table", "version": 1, "seconds": {"1": 1}}), "malformed"),
    (json.dumps({"format": "mtpedge-cost-table", "version": 1, "seconds": {"1": -1},
                 "bundle": {"model_name": "m", "source_sha256": "s", "context": 8}}), "seconds > 0"),
])
def test_bad_files_are_refused_clearly(tmp_path, content, match):
    path = tmp_path / "cost.json"
    path.write_text(content)
    with pytest.raises(CostTableError, match=match):
        CostTable.load(path)

"""`mtpedge bench` on the real SmolLM2 bundle with its peers (slow: loads the model three ways)."""

from __future__ import annotations

import importlib.util
import json

import pytest

from mtpedge.bench.questions import SPEC_BENCH
from mtpedge.bench.report import validate_report
from mtpedge.main import main


@pytest.mark.slow
def test_bench_smollm2_with_peers(smollm2_float_bundle, tmp_path):
    questions = SPEC_BENCH
    peers = ["transformers"] + (["llama.cpp"] if importlib.util.find_spec("llama_cpp") else [])
    out = tmp_path / "bench"
    code = main(["bench", "--bundle", str(smollm2_float_bundle), "--questions", str(questions),
                 "--categories", "writing", "--limit", "1", "--max-new-tokens", "24",
                 "--methods", ",".join(["none", *peers]), "--no-sweep", "--no-plots", "--out", str(out)])
    assert code == 0
    doc = json.loads((out / "bench.json").read_text())
    assert validate_report(doc, expect_methods=["none", *peers]) == []
    assert doc["settings"]["peer_model_check"] == "same file as the bundle's source"
    # both MT-bench turns, chat template, every method
    assert sorted((r["method"], r["turn"]) for r in doc["rows"]) == sorted(
        (m, t) for m in ["none", *peers] for t in (1, 2))
    # transformers runs the same float32 weights: its first turn must match plain decoding for a while at least
    first = next(r for r in doc["rows"] if r["method"] == "transformers" and r["turn"] == 1)
    assert first["same_as_baseline"] or first["first_difference"] >= 8

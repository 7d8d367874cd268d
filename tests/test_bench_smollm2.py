"""`mtpedge bench` on the real SmolLM2 bundle with its peers (slow: loads the model three ways)."""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import pytest

from mtpedge.bench.report import validate_report
from mtpedge.main import main

ROOT = Path(__file__).resolve().parents[1]
# the question file lies beside the repository (or beside a worktree's parent), or where $MTPEDGE_SPEC_BENCH says
CANDIDATES = [Path(os.environ["MTPEDGE_SPEC_BENCH"])] if os.environ.get("MTPEDGE_SPEC_BENCH") else []
CANDIDATES += [base / "shared" / "data" / "spec_bench" / "question.jsonl" for base in (ROOT.parent, ROOT.parent.parent)]
QUESTIONS = next((p for p in CANDIDATES if p.is_file()), CANDIDATES[-1])


@pytest.mark.slow
@pytest.mark.skipif(not QUESTIONS.is_file(), reason=f"no Spec-Bench question file at {QUESTIONS}")
def test_bench_smollm2_with_peers(smollm2_bundle, tmp_path):
    peers = ["transformers"] + (["llama.cpp"] if importlib.util.find_spec("llama_cpp") else [])
    out = tmp_path / "bench"
    code = main(["bench", "--bundle", str(smollm2_bundle), "--questions", str(QUESTIONS), "--categories", "writing",
                 "--limit", "1", "--max-new-tokens", "24", "--methods", ",".join(["none", *peers]), "--no-sweep",
                 "--no-plots", "--out", str(out)])
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

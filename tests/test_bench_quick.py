"""`mtpedge bench --quick` on a tiny bundle: it runs, its outputs are complete and consistent (not timed)."""

from __future__ import annotations

import json

import pytest

from mtpedge.bench.memory import RssMonitor
from mtpedge.bench.report import validate_report
from mtpedge.main import main
from mtpedge.runtime.drafters import drafter_names

# mtp needs a bundle with a trained adapter (tests/test_mtp_decode.py), dmtd-spec and dmtd a DMTD bundle
# (tests/test_dmtd_runtime.py); on this plain bundle they are "missing"
NEEDS_A_BUNDLE_OF_ITS_OWN = ("mtp", "dmtd-spec", "dmtd")
PLAIN_DRAFTERS = [name for name in drafter_names() if name not in NEEDS_A_BUNDLE_OF_ITS_OWN]
OPTION_METHOD = "lookup:width=4:max_ngram=2"  # a drafter with options is a method of its own


@pytest.fixture(scope="module")
def quick_report(tiny_bundle, tiny_model_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("bench") / "quick"
    code = main(["bench", "--bundle", str(tiny_bundle("llama")), "--quick", "--out", str(out),
                 "--methods", ",".join([*drafter_names(), OPTION_METHOD, "transformers", "llama.cpp"]),
                 "--model", str(tiny_model_dir("llama"))])
    assert code == 0
    return out, json.loads((out / "bench.json").read_text())


def test_quick_writes_every_output(quick_report):
    out, doc = quick_report
    assert sorted(p.name for p in out.iterdir()) == [
        "bench.json", "bench.md", "tau_by_category.png", "tokens_per_s.png", "width_sweep.png"]
    for png in out.glob("*.png"):
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert validate_report(doc, expect_methods=[*PLAIN_DRAFTERS, OPTION_METHOD, "transformers"]) == []
    md = (out / "bench.md").read_text()
    assert "| none | mtpedge | 1.00 |" in md and "## Width sweep" in md


def test_quick_rows_cover_every_turn_of_every_method(quick_report):
    _, doc = quick_report
    ran = [m["name"] for m in doc["methods"] if m["status"] == "ran"]
    assert ran == [*PLAIN_DRAFTERS, OPTION_METHOD, "transformers"]
    # the built-in questions: one with two turns, one with one
    assert sorted((r["method"], r["question_id"], r["turn"]) for r in doc["rows"]) == sorted(
        (m, q, t) for m in ran for q, t in (("quick-1", 1), ("quick-1", 2), ("quick-2", 1)))
    for row in doc["rows"]:
        assert row["skipped"] is None and 1 <= row["new_tokens"] <= 8
    none = doc["summary"]["none"]["overall"]
    assert none["tau"] == 1.0 and none["speedup"] == pytest.approx(1.0) and none["same_as_baseline"] == 1.0
    assert none["decode_calls"] == sum(r["new_tokens"] - 1 for r in doc["rows"] if r["method"] == "none")


def test_quick_lossless_methods_and_float32_peer_match_plain_decoding(quick_report):
    _, doc = quick_report
    # every mtpedge drafter is lossless; transformers runs the same float32 weights (tiny model: no near-ties)
    for name in [*PLAIN_DRAFTERS, OPTION_METHOD, "transformers"]:
        assert doc["summary"][name]["overall"]["same_as_baseline"] == 1.0, name


def test_quick_reports_missing_peers_with_the_reason(quick_report):
    _, doc = quick_report
    llama = next(m for m in doc["methods"] if m["name"] == "llama.cpp")
    assert llama["status"] == "missing"
    mtp = next(m for m in doc["methods"] if m["name"] == "mtp")
    assert mtp["status"] == "missing" and "train-mtp" in mtp["reason"]
    assert "GGUF" in llama["reason"] or "not installed" in llama["reason"]


def test_quick_records_machine_sweep_and_memory(quick_report):
    _, doc = quick_report
    assert doc["machine"]["logical_cores"] >= 1 and "onnxruntime" in doc["machine"]["versions"]
    widths = sorted(r["width"] for r in doc["sweep"]["records"])
    assert widths == [1, 8, 16, 32]  # the tiny bundle's decode widths and its prefill width
    assert all(r["bound"] in ("memory", "compute") for r in doc["sweep"]["records"])
    for m in doc["methods"]:
        if m["status"] == "ran":
            assert m["peak_rss_mb"] > 0


def test_validate_report_finds_gaps(quick_report):
    _, doc = quick_report
    broken = json.loads(json.dumps(doc))
    del broken["summary"]["none"]["overall"]["tau"]
    broken["rows"] = [r for r in broken["rows"] if r["method"] != "transformers"]
    problems = validate_report(broken, expect_methods=["none", "esp-that-never-ran"])
    assert "method 'esp-that-never-ran' did not run" in problems
    assert "none/overall lacks ['tau']" in problems
    assert "no rows for ['transformers']" in problems
    assert validate_report({"schema": "x"})[0] == "missing top-level 'settings'"


def test_bench_refuses_bad_arguments(tiny_bundle, capsys):
    assert main(["bench", "--bundle", str(tiny_bundle("llama")), "--quick", "--methods", "eagle"]) == 2
    assert "method 'eagle' is neither a peer" in capsys.readouterr().err
    assert main(["bench", "--bundle", str(tiny_bundle("llama")), "--methods", "hybrid:widht=32"]) == 2
    assert "takes no option widht" in capsys.readouterr().err


def test_bench_reads_the_shipped_spec_bench_questions_by_default(tiny_bundle, capsys):
    """No folder outside the checkout is needed: the question file ships with mtpedge, with its license."""
    from mtpedge.bench.questions import SPEC_BENCH, load_questions

    assert main(["bench", "--bundle", str(tiny_bundle("llama")), "--categories", "poetry"]) == 2
    assert "unknown categories ['poetry']: the file has writing, roleplay" in capsys.readouterr().err
    questions = load_questions(SPEC_BENCH)
    assert len(questions) == 480 and len({q.category for q in questions}) == 13
    assert "Apache License" in (SPEC_BENCH.parent / "LICENSE").read_text()
    assert "hemingkx/Spec-Bench" in (SPEC_BENCH.parent / "SOURCE.md").read_text()


def test_rss_monitor_keeps_a_peak_per_window():
    monitor = RssMonitor(interval_s=0.001)
    with monitor.window("big"):
        block = bytearray(64 * 2**20)
        block[::4096] = b"x" * len(block[::4096])
    del block
    with monitor.window("small"):
        pass
    monitor.close()
    assert monitor.peaks["big"] > 0 and monitor.peaks["small"] > 0


def test_optimum_conversion_writes_rope_theta_for_old_transformers(tiny_model_dir, tmp_path):
    from mtpedge.bench.peers.optimum_peer import write_hf_folder

    theta = write_hf_folder(tiny_model_dir("llama"), tmp_path / "hf")
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert theta == 50000.0 and config["rope_theta"] == 50000.0
    assert config["rope_scaling"]["rope_type"] == "llama3" and config["rope_scaling"]["factor"] == 8.0


def test_drafter_options_in_a_method_spec_take_effect(quick_report):
    _, doc = quick_report
    # width 4 = the root and at most 3 drafts, so no call can accept more than 3
    accepted = [int(k) for r in doc["rows"] if r["method"] == OPTION_METHOD for k in r["accepted_per_call"]]
    assert accepted and max(accepted) <= 3


def test_cost_aware_drafters_report_predicted_beside_achieved_tokens_per_s(quick_report):
    """Issue 15 item 2: the bench JSON (and bench.md) say what the tree sizing expected and what it got."""
    out, doc = quick_report
    from mtpedge.runtime.drafters import DRAFTERS

    for name in PLAIN_DRAFTERS:
        overall = doc["summary"][name]["overall"]
        sized = name in DRAFTERS and DRAFTERS[name].sized
        assert (overall["predicted_tokens_per_s"] is not None) == sized, name
        if sized:
            assert overall["predicted_tokens_per_s"] > 0 and overall["achieved_step_tokens_per_s"] > 0
    assert "predicted tokens/s" in (out / "bench.md").read_text()


def test_first_turns_of_spread_questions_and_an_interleaved_sweep_of_two_bundles(tiny_bundle, tmp_path):
    """The old interleaved scripts' runs as bench options: first turns only, questions spread over each category,
    and the call-cost comparison of two bundles (here two architectures) timed round after round."""
    questions = tmp_path / "q.jsonl"
    questions.write_text("\n".join(json.dumps({"question_id": i, "category": "ab"[i // 4], "turns": [f"q{i}", "more"]})
                                   for i in range(8)))
    llama, qwen = tiny_bundle("llama"), tiny_bundle("qwen2")
    out = tmp_path / "out"
    assert main(["bench", "--bundle", str(llama), "--questions", str(questions), "--limit", "2", "--pick", "spread",
                 "--turns", "1", "--methods", "none,lookup", "--max-new-tokens", "4", "--sweep-bundles",
                 f"{llama},{qwen}", "--sweep-repeats", "3", "--no-plots", "--out", str(out)]) == 0
    doc = json.loads((out / "bench.json").read_text())
    assert sorted({(r["question_id"], r["turn"]) for r in doc["rows"]}) == [(0, 1), (2, 1), (4, 1), (6, 1)]
    assert doc["settings"]["pick"] == "spread" and doc["settings"]["turns"] == 1
    assert "the first 1 turn(s) of each question" in (out / "bench.md").read_text()
    records = doc["sweep"]["records"]
    assert {r["bundle"] for r in records} == {str(llama), str(qwen)} and all(r["repeats"] == 3 for r in records)
    lookup = doc["summary"]["lookup"]["overall"]
    # the decode calls' graph time lies inside the decode wall time, so host time is positive (it once read -0.40 ms,
    # later -0.64 ms of graph time, when the prefill's wall time, not its graph time, was subtracted from the total)
    assert lookup["graph_ms_per_call"] > 0 and lookup["host_ms_per_call"] > 0


def test_bench_at_two_thread_counts_writes_a_run_each_and_a_side_by_side_summary(tiny_bundle, tmp_path):
    out = tmp_path / "threads"
    code = main(["bench", "--bundle", str(tiny_bundle("llama")), "--quick", "--out", str(out), "--threads", "1,2",
                 "--methods", "none,lookup", "--no-sweep", "--no-plots"])
    assert code == 0
    assert sorted(p.name for p in out.iterdir()) == ["bench.json", "bench.md", "threads-1", "threads-2"]
    for threads in (1, 2):
        doc = json.loads((out / f"threads-{threads}" / "bench.json").read_text())
        assert doc["settings"]["threads"] == threads and validate_report(doc) == []
    summary = json.loads((out / "bench.json").read_text())
    assert summary["runs"] == ["threads-1", "threads-2"] and set(summary["side_by_side"]["lookup"]) == {"1", "2"}
    assert "| method | τ @1 | tok/s @1 |" in (out / "bench.md").read_text()


def test_bench_remeasure_writes_the_cost_table_to_the_cache(tiny_bundle, tmp_path, monkeypatch):
    # it used to measure in memory only, so a table measured under load stayed cached for generate, chat and
    # serve (benchmarks/results/fast/README.md section 37)
    monkeypatch.setenv("MTPEDGE_CACHE", str(tmp_path / "cache"))
    code = main(["bench", "--bundle", str(tiny_bundle("llama")), "--quick", "--out", str(tmp_path / "out"),
                 "--methods", "none", "--no-sweep", "--no-plots", "--cost-model", "remeasure"])
    assert code == 0 and list((tmp_path / "cache" / "costs").glob("*.json"))

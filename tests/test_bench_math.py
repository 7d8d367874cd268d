"""The bench's pure parts: question parsing, method names, aggregation math, roofline counts, report checks."""

from __future__ import annotations

import pytest

from mtpedge.bench.aggregate import OVERALL, acceptance_by_depth, reference_peer, summarize, tau
from mtpedge.bench.methods import MethodRun
from mtpedge.bench.questions import (
    SPEC_BENCH,
    Question,
    QuestionFileError,
    heldout_turns,
    load_questions,
    parse_questions,
    round_robin,
    select_questions,
)
from mtpedge.bench.roofline import CallCost, Ceilings, call_cost, matmul_weights
from mtpedge.bench.runner import Row, first_difference, rotated, run_questions
from mtpedge.bench.suite import resolve_methods
from mtpedge.runtime.model_config import DecoderConfig

LINES = [
    '{"question_id": 1, "category": "writing", "turns": ["a", "b"]}',
    '{"question_id": 2, "category": "writing", "turns": ["c", "d"]}',
    "",
    '{"question_id": 3, "category": "math", "turns": ["e"]}',
    '{"question_id": 4, "category": "writing", "turns": ["f"]}',
]


def test_parse_questions_reads_spec_bench_lines():
    questions = parse_questions(LINES)
    assert [q.question_id for q in questions] == [1, 2, 3, 4]
    assert questions[0].turns == ("a", "b")
    assert questions[2].category == "math"


@pytest.mark.parametrize("line, words", [
    ('{"question_id": 1, "category": "x", "turns": [', "q.jsonl:2 is not JSON"),
    ('{"question_id": 1, "category": "x", "turns": []}', "q.jsonl:2 needs question_id"),
    ('{"category": "x", "turns": ["a"]}', "q.jsonl:2 needs question_id"),
    ('["a"]', "q.jsonl:2 needs"),
])
def test_parse_questions_names_the_bad_line(line, words):
    with pytest.raises(QuestionFileError, match=words):
        parse_questions([LINES[0], line], "q.jsonl")


def test_select_questions_limits_per_category_in_file_order():
    questions = parse_questions(LINES)
    assert [q.question_id for q in select_questions(questions, limit=1)] == [1, 3]
    assert [q.question_id for q in select_questions(questions, ["writing"], limit=2)] == [1, 2]
    assert [q.question_id for q in select_questions(questions)] == [1, 2, 3, 4]
    with pytest.raises(QuestionFileError, match="unknown categories \\['poetry'\\]: the file has writing, math"):
        select_questions(questions, ["poetry"])
    with pytest.raises(QuestionFileError, match="--limit must be at least 1"):
        select_questions(questions, limit=0)


def test_max_chars_leaves_out_long_first_turns_before_skip_and_limit():
    lines = [f'{{"question_id": {i}, "category": "w", "turns": ["{"x" * (5 if i % 2 else 50)}", "long second turn"]}}'
             for i in range(6)]
    questions = parse_questions(lines)
    assert [q.question_id for q in select_questions(questions, max_chars=10)] == [1, 3, 5]
    assert [q.question_id for q in select_questions(questions, limit=1, skip=1, max_chars=10)] == [3]


def test_the_held_out_questions_are_not_the_benchmarks():
    held = heldout_turns()
    bench = [q.turns[0] for q in load_questions(SPEC_BENCH, limit=4, max_chars=1500)]
    assert len(held) == len(set(held)) >= 20  # two per category where a category has six short enough
    assert not set(held) & set(bench)
    assert heldout_turns(skip=0, take=4) == bench


def test_spread_picks_evenly_over_each_category_and_between_picks_none_of_spreads():
    lines = [f'{{"question_id": {i}, "category": "{"ab"[i // 10]}", "turns": ["t"], "reference": ["r{i}"]}}'
             for i in range(20)]
    questions = parse_questions(lines)
    assert questions[3].reference == ("r3",)
    pick = {how: [q.question_id for q in select_questions(questions, limit=3, pick=how)]
            for how in ("first", "spread", "between")}
    assert pick == {"first": [0, 1, 2, 10, 11, 12], "spread": [0, 3, 6, 10, 13, 16],
                    "between": [1, 4, 7, 11, 14, 17]}
    assert [q.question_id for q in select_questions(questions, ["b"], limit=20, pick="spread")] == list(range(10, 20))
    with pytest.raises(QuestionFileError, match="--pick must be one of first, spread, between"):
        select_questions(questions, limit=1, pick="random")


def test_resolve_methods_expands_all_and_always_keeps_the_baseline():
    assert resolve_methods(["all"], ["none", "lookup"]) == [
        "none", "lookup", "llama.cpp", "llama.cpp-lookup", "llama.cpp-native", "llama.cpp-native-lookup",
        "transformers", "transformers-lookup", "optimum-ort"]
    assert resolve_methods(["transformers", "lookup"], ["none", "lookup"]) == ["none", "transformers", "lookup"]
    with pytest.raises(ValueError, match="method 'eagle' is neither a peer .* nor a drafter: unknown drafter"):
        resolve_methods(["eagle"], ["none"])


def test_round_robin_takes_one_question_per_category_per_round():
    questions = parse_questions(LINES)  # writing 1, 2, 4; math 3
    assert [q.question_id for q in round_robin(questions)] == [1, 3, 2, 4]
    assert round_robin([]) == []


def test_methods_are_drafter_specs_or_peers():
    from mtpedge.bench_cmd import names_mtp
    from mtpedge.runtime.drafters import drafter_names

    assert names_mtp(("none", "mtp:mtp_layout=linear")) and not names_mtp(("all",)) and not names_mtp(("hybrid",))
    names = drafter_names()
    assert resolve_methods(["esp:mask_init=soft", "esp"], names) == ["none", "esp:mask_init=soft", "esp"]
    with pytest.raises(ValueError, match="unknown drafter 'transformers'"):
        resolve_methods(["transformers:width=4"], names)
    with pytest.raises(ValueError, match="takes no option masks"):
        resolve_methods(["lookup:masks=2"], names)


class _CountingMethod:
    kind = "mtpedge"

    def __init__(self, name: str) -> None:
        self.name, self.calls = name, 0

    def generate(self, prompt_ids, max_new_tokens):
        self.calls += 1
        return MethodRun([1, 2], first_token_s=0.1, elapsed_s=0.2)


class _Tokenizer:
    def encode_chat(self, messages):
        return list(range(len(messages)))

    def decode(self, ids):
        return "x"


def test_run_questions_starts_no_question_after_the_deadline():
    questions = [Question(i, "writing", ("a",)) for i in range(3)]
    method = _CountingMethod("none")
    assert run_questions([method], questions, _Tokenizer(), 64, 4, deadline=0.0) == []  # long past
    assert method.calls == 0
    rows = run_questions([method], questions, _Tokenizer(), 64, 4, deadline=float("inf"))
    assert [r.question_id for r in rows] == [0, 1, 2] and method.calls == 3


def test_run_questions_answers_only_the_first_turns_when_asked():
    question = Question(1, "writing", ("a", "b", "c"))
    assert [r.turn for r in run_questions([_CountingMethod("none")], [question], _Tokenizer(), 64, 4)] == [1, 2, 3]
    assert [r.turn for r in run_questions([_CountingMethod("none")], [question], _Tokenizer(), 64, 4,
                                          max_turns=1)] == [1]


def test_each_question_rotates_the_order_of_the_methods():
    order = []

    class Recording(_CountingMethod):
        def generate(self, prompt_ids, max_new_tokens):
            order.append(self.name)
            return super().generate(prompt_ids, max_new_tokens)

    questions = [Question(i, "writing", ("a",)) for i in range(4)]
    run_questions([Recording("none"), Recording("a"), Recording("b")], questions, _Tokenizer(), 64, 4)
    assert order == ["none", "a", "b", "a", "b", "none", "b", "none", "a", "none", "a", "b"]
    assert rotated([1, 2, 3], 4) == [2, 3, 1] and rotated([1], 7) == [1]


def test_first_difference():
    assert first_difference([1, 2, 3], [1, 2, 3]) is None
    assert first_difference([1, 2, 3], [1, 5, 3]) == 1
    assert first_difference([1, 2], [1, 2, 3]) == 2
    assert first_difference([], []) is None


def _row(qid, category, turn, method, tokens, tps, calls=None, accepted=None, first=0.5, elapsed=1.5, **kw):
    return Row(qid, category, turn, method, prompt_tokens=10, new_tokens=tokens, decode_calls=calls,
               accepted_per_call=accepted, tokens_per_s=tps, first_token_s=first, elapsed_s=elapsed, **kw)


def test_tau_and_acceptance_by_depth():
    assert tau({0: 6, 1: 3, 2: 1}) == pytest.approx(1 + 5 / 10)
    assert tau(None) is None
    assert acceptance_by_depth({0: 6, 1: 3, 2: 1}) == {1: pytest.approx(0.4), 2: pytest.approx(0.1)}
    assert acceptance_by_depth({0: 4}) == {}


def test_summarize_pools_tau_and_pairs_speedup_with_the_baseline():
    rows = [
        _row(1, "writing", 1, "none", 11, 10.0, calls=10, accepted={"0": 10}, same_as_baseline=True),
        _row(1, "writing", 2, "none", 6, 20.0, calls=5, accepted={"0": 5}, same_as_baseline=True),
        _row(2, "math", 1, "none", 5, 30.0, calls=4, accepted={"0": 4}, same_as_baseline=True),
        _row(1, "writing", 1, "lookup", 11, 15.0, calls=6, accepted={"0": 3, "1": 2, "2": 1},
             same_as_baseline=True, graph_s=0.6),
        _row(1, "writing", 2, "lookup", 6, 40.0, calls=3, accepted={"0": 1, "1": 2},
             same_as_baseline=False, first_difference=4, graph_s=0.3),
        _row(2, "math", 1, "lookup", 0, 0.0, skipped="too long"),
        _row(1, "writing", 1, "peer", 11, 45.0, same_as_baseline=False, first_difference=2),
    ]
    s = summarize(rows)
    assert list(s["lookup"]) == ["writing", "math", OVERALL]
    w = s["lookup"]["writing"]
    assert w["decode_calls"] == 9
    assert w["accepted_histogram"] == {"0": 4, "1": 4, "2": 1}
    assert w["tau"] == pytest.approx(1 + 6 / 9)
    assert w["acceptance_by_depth"] == {"1": pytest.approx(5 / 9), "2": pytest.approx(1 / 9)}
    assert w["tokens_per_s"] == pytest.approx(27.5)
    assert w["speedup"] == pytest.approx(27.5 / 15.0)  # baseline mean over the same two turns
    assert w["same_as_baseline"] == pytest.approx(0.5)
    assert w["mean_first_difference"] == pytest.approx(4)
    assert w["tokens_per_s_pooled"] == pytest.approx((10 + 5) / 2.0)  # decode seconds 1.0 per row
    # the decode calls' graph time: 0.6 + 0.3 s over 9 calls; the rest of the 2 s of decoding is host time
    assert w["graph_ms_per_call"] == pytest.approx(100.0) and w["host_ms_per_call"] == pytest.approx(1100 / 9)
    assert s["lookup"]["math"]["turns"] == 0 and s["lookup"]["math"]["skipped"] == 1
    assert s["lookup"]["math"]["speedup"] is None
    assert s["lookup"][OVERALL]["skipped"] == 1 and s["lookup"][OVERALL]["turns"] == 2
    assert s["none"][OVERALL]["tau"] == 1.0
    assert s["none"][OVERALL]["speedup"] == pytest.approx(1.0)
    peer = s["peer"]["writing"]
    assert peer["tau"] is None and peer["decode_calls"] is None and peer["accepted_histogram"] is None
    assert peer["graph_ms_per_call"] is None and s["none"][OVERALL]["graph_ms_per_call"] is None  # not timed
    assert peer["speedup"] == pytest.approx(4.5)


def test_roofline_counts_for_a_small_config():
    config = DecoderConfig(architecture="llama", vocab_size=100, hidden_size=8, intermediate_size=16, num_layers=2,
                           num_heads=2, num_kv_heads=1, head_dim=4)
    per_layer = 8 * 8 + 2 * 8 * 4 + 8 * 8 + 3 * 8 * 16
    assert matmul_weights(config) == 2 * per_layer + 8 * 100
    cost = call_cost(config, width=2, context=6)
    p = 2 * per_layer + 800
    assert cost.flops == 2 * 2 * p + 2 * 4 * 2 * 8 * 2 * 4
    weights, cache, mask, logits = p * 4, 2 * 2 * 1 * 6 * 4 * 4, 2 * 8 * 4, 2 * 100 * 4
    new_kv, scores = 2 * 2 * 2 * 4 * 4, 2 * 2 * 2 * 2 * 8 * 4
    assert cost.bytes == weights + cache + mask + logits + new_kv + scores
    assert call_cost(config, 2, 6, "int4").bytes == cost.bytes - p * 3.5
    ceilings = Ceilings(flops_per_s=1e9, bytes_per_s=1e9, how="test")
    assert ceilings.seconds(CallCost(2e9, 1e9)) == 2.0 and ceilings.bound(CallCost(2e9, 1e9)) == "compute"
    assert ceilings.bound(CallCost(1e9, 3e9)) == "memory"


def test_ratios_against_llama_cpp_pair_the_same_turns():
    rows = [
        _row(1, "writing", 1, "none", 11, 10.0),
        _row(1, "writing", 2, "none", 11, 20.0),
        _row(1, "writing", 1, "hybrid", 11, 30.0),
        _row(1, "writing", 2, "hybrid", 11, 30.0),
        _row(1, "writing", 1, "llama.cpp", 11, 20.0),  # turn 2 not run by the peer: not compared
    ]
    s = summarize(rows)
    assert s["hybrid"][OVERALL]["vs_reference_peer"] == pytest.approx(30.0 / 20.0)
    assert s["none"][OVERALL]["vs_reference_peer"] == pytest.approx(10.0 / 20.0)
    assert summarize(rows[:4])["hybrid"][OVERALL]["vs_reference_peer"] is None  # no llama.cpp in the run


def test_llama_cpps_own_tool_is_the_reference_when_it_ran():
    rows = [_row(1, "writing", 1, "none", 11, 10.0), _row(1, "writing", 1, "llama.cpp", 11, 20.0)]
    assert reference_peer(rows) == "llama.cpp"
    rows.append(_row(1, "writing", 1, "llama.cpp-native", 11, 25.0))
    assert reference_peer(rows) == "llama.cpp-native"
    assert summarize(rows)["none"][OVERALL]["vs_reference_peer"] == pytest.approx(10.0 / 25.0)
    assert summarize(rows, peer="llama.cpp")["none"][OVERALL]["vs_reference_peer"] == pytest.approx(10.0 / 20.0)


def test_skip_leaves_out_the_first_questions_of_each_category():
    questions = parse_questions(LINES)
    assert [q.question_id for q in select_questions(questions, skip=1)] == [2, 4]
    assert [q.question_id for q in select_questions(questions, limit=1, skip=1)] == [2]
    assert select_questions(questions, skip=3) == []
    with pytest.raises(QuestionFileError, match="--skip"):
        select_questions(questions, skip=-1)


def test_runs_at_several_thread_counts_are_summarised_side_by_side():
    from mtpedge.bench.threads import side_by_side, threads_markdown

    def doc(threads, tps):
        rows = [_row(1, "writing", 1, "none", 11, tps), _row(1, "writing", 1, "llama.cpp", 11, 2 * tps)]
        return {"settings": {"threads": threads, "bundle_name": "m", "questions_run": 1, "selection": "s",
                             "max_new_tokens": 8},
                "machine": {"load_average_at_start": 1.0},
                "methods": [{"name": "none", "status": "ran"}, {"name": "llama.cpp", "status": "ran"}],
                "summary": summarize(rows)}

    docs = [doc(1, 10.0), doc(2, 16.0)]
    table = side_by_side(docs)
    assert table["none"][2]["tokens_per_s"] == 16.0 and table["none"][1]["vs_reference_peer"] == pytest.approx(0.5)
    md = threads_markdown(docs, ["threads-1", "threads-2"])
    assert "| none | – | 10.0 | 1.00 | 0.50 | – | 16.0 | 1.00 | 0.50 |" in md  # τ: these rows carry no calls
    assert "[2 thread(s)](threads-2/bench.md)" in md


def test_weight_bytes_read_precision_labels():
    from mtpedge.bench.roofline import weight_bytes

    assert weight_bytes("float32") == 4.0 and weight_bytes("int4-b32+out:int8") == 0.5
    assert weight_bytes("gguf-a4-down0") == weight_bytes("gguf") == 20 / 32 and weight_bytes("qdq-a16w8") == 1.0

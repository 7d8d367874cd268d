"""The decode loop: streaming, stop tokens, limits, sampling, statistics, and the CLI around it."""

from __future__ import annotations

import json

import numpy as np
import pytest

from mtpedge.main import main
from mtpedge.runtime.engine import Engine
from mtpedge.runtime.generate import generate
from mtpedge.runtime.sampling import SamplingConfig


@pytest.fixture(scope="module")
def engine(tiny_bundle):
    return Engine.load(tiny_bundle("llama"))


def test_streamed_tokens_are_the_result(engine):
    streamed = []
    result = generate(engine, engine.tokenizer.encode("The quick"), 30, on_tokens=streamed.extend,
                      stop_token_ids=set())
    assert streamed == result.token_ids and len(streamed) == 30
    stats = result.stats
    assert stats.finish_reason == "length"
    assert stats.decode_calls == 29 and stats.tokens_per_call == 1.0
    assert stats.forward_calls == stats.prefill_calls + 29
    assert stats.accepted_histogram == {0: 29}
    assert 0 < stats.graph_seconds <= stats.elapsed_seconds


def test_a_stop_token_ends_generation_and_is_not_returned(engine):
    ids = engine.tokenizer.encode("The quick")
    free = generate(engine, ids, 20, stop_token_ids=set()).token_ids
    stop = free[5]
    first = free.index(stop)
    result = generate(engine, ids, 20, stop_token_ids={stop})
    assert result.token_ids == free[:first]
    assert result.stats.finish_reason == "stop"


def test_prefill_in_chunks_equals_prefill_at_once(engine):
    ids = engine.tokenizer.encode("The quick brown fox jumps over the lazy dog. A small model speaks in short")
    assert len(ids) > engine.graphs.prefill_width  # several chunks
    engine.reset()
    chunked = engine.prefill(ids)
    engine.reset()
    for token in ids:  # one token per call: the most different chunking there is
        single = engine.prefill([token])
    np.testing.assert_allclose(chunked, single, atol=1e-4)


def test_seeded_sampling_is_reproducible_and_seed_dependent(engine):
    ids = engine.tokenizer.encode("Numbers like")
    config = SamplingConfig(temperature=1.0, top_p=0.95, seed=3)
    a = generate(engine, ids, 25, config, stop_token_ids=set()).token_ids
    b = generate(engine, ids, 25, config, stop_token_ids=set()).token_ids
    c = generate(engine, ids, 25, SamplingConfig(temperature=1.0, top_p=0.95, seed=4), stop_token_ids=set()).token_ids
    assert a == b and a != c


def test_cancellation_is_polled_between_steps(engine):
    steps = []
    result = generate(engine, [5, 6], 50, stop_token_ids=set(), should_stop=lambda: len(steps) >= 3,
                      on_tokens=steps.append)
    assert result.stats.finish_reason == "cancelled" and len(result.token_ids) == 3


def test_bad_arguments(engine):
    with pytest.raises(ValueError, match="max_new_tokens"):
        generate(engine, [5], 0)
    with pytest.raises(ValueError, match="on_overflow"):
        generate(engine, [5], 3, on_overflow="wrap")


def test_cli_generate_json(tiny_bundle, capsys):
    assert main(["generate", "The quick", "--bundle", str(tiny_bundle("llama")), "--max-new-tokens", "12",
                 "--json", "--raw"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    for key in ("text", "token_ids", "new_tokens", "forward_calls", "tokens_per_call", "tokens_per_s", "elapsed_s"):
        assert key in out
    assert out["new_tokens"] == len(out["token_ids"]) <= 12
    engine = Engine.load(tiny_bundle("llama"))
    assert out["text"] == engine.tokenizer.decode(out["token_ids"])


def test_cli_generate_streams_text_and_stats(tiny_bundle, capsys):
    assert main(["generate", "hello", "--bundle", str(tiny_bundle("qwen2")), "--max-new-tokens", "8"]) == 0
    captured = capsys.readouterr()
    assert "tokens/call" in captured.err and "tokens/s" in captured.err


def test_cli_generate_stops_at_the_context_and_prints_what_it_made(tiny_bundle, capsys):
    """#18 item 2: a long prompt with a large --max-new-tokens ends with finish_reason "length" at the context
    (exit 0, the output printed, also with --json) instead of exiting 2 with nothing."""
    prompt = "hello " * 46  # 230 of the tiny bundle's 256 positions (its tokenizer splits a word into 5)
    argv = ["generate", prompt, "--bundle", str(tiny_bundle("llama")), "--raw", "--max-new-tokens", "100"]
    assert main([*argv, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["finish_reason"] == "length" and out["token_ids"]
    assert out["prompt_tokens"] + out["new_tokens"] == 256 + 1  # every position used, plus the last call's token
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert captured.out.strip() and "finish length" in captured.err


@pytest.mark.parametrize("options, message", [
    (["--max-new-tokens", "0"], "--max-new-tokens must be at least 1"),
    (["--temperature", "nan"], "--temperature must be a finite number"),
    (["--temperature", "-1"], "--temperature must be a finite number"),
    (["--context", "512"], "drop --context"),
])
def test_cli_generate_refuses_bad_options_before_loading(tmp_path, capsys, options, message):
    """#18 item 2: checked before the engine loads (here the bundle does not even exist)."""
    assert main(["generate", "hi", "--bundle", str(tmp_path / "missing"), *options]) == 2
    err = capsys.readouterr().err
    assert message in err and "does not exist" not in err


@pytest.mark.parametrize("spec, message", [
    ("lookup:masks=2", "takes no option masks; its options: width, max_ngram, min_ngram, branches"),
    ("hybrid:width=wide", "option width takes an integer"),
    ("esp:mask_init=zeros", "unknown mask init 'zeros'"),
    ("medusa", "unknown drafter 'medusa'"),
])
def test_cli_generate_refuses_a_bad_drafter_spec_before_loading(tmp_path, capsys, spec, message):
    with pytest.raises(SystemExit) as exit_info:
        main(["generate", "hi", "--bundle", str(tmp_path / "missing"), "--drafter", spec])
    assert exit_info.value.code == 2 and message in capsys.readouterr().err


def test_cli_generate_refuses_a_width_above_the_widest_decode_graph(tiny_bundle, capsys):
    assert main(["generate", "hi", "--bundle", str(tiny_bundle("llama")), "--drafter", "hybrid:width=64"]) == 2
    assert "width 64 is above this bundle's widest decode graph (32 slots)" in capsys.readouterr().err

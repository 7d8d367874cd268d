"""The llama.cpp-native peers: llama.cpp's own tools timed by their own reports."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

from mtpedge.bench.peers import PEERS, PeerConfig, peer_missing_reason
from mtpedge.bench.peers.llama_cpp_native import DEFAULT_BIN, parse_timing

# what llama-completion and llama-lookup print to stderr (llama.cpp as vendored by llama-cpp-python 0.3.36; each line's
# timestamp cut)
COMPLETION_LOG = """
I common_perf_print:        load time =      68.85 ms
I common_perf_print: prompt eval time =     141.24 ms /    37 tokens (    3.82 ms per token,   261.96 tokens per second)
I common_perf_print:        eval time =     377.10 ms /    63 runs   (    5.99 ms per token,   167.06 tokens per second)
I common_perf_print:       total time =     524.40 ms /   100 tokens
"""
LOOKUP_LOG = """
I encoded  659 tokens in    2.665 seconds, speed:  299.431 t/s
I decoded  139 tokens in    1.829 seconds, speed:   76.004 t/s
I n_accept     = 65
I common_perf_print: prompt eval time =    3901.87 ms /   825 tokens (    4.73 ms per token,   211.44 tokens per second)
I common_perf_print:        eval time =     493.13 ms /    57 runs   (    8.65 ms per token,   115.59 tokens per second)
"""


def test_completion_timing_is_the_prompt_evaluation_then_the_eval_runs():
    timing = parse_timing("llama-completion", COMPLETION_LOG)
    assert (timing.prompt_tokens, timing.decoded) == (37, 63)
    assert timing.prompt_s == pytest.approx(0.14124) and timing.decode_s == pytest.approx(0.3771)


def test_lookup_timing_is_its_own_summary_not_the_batched_eval_lines():
    # llama-lookup verifies drafts in batches that common_perf_print counts as prompt evaluation: its own
    # encoded / decoded summary is the one that separates the prompt from decoding
    timing = parse_timing("llama-lookup", LOOKUP_LOG)
    assert (timing.prompt_tokens, timing.decoded) == (659, 139)
    assert timing.prompt_s == pytest.approx(2.665) and timing.decode_s == pytest.approx(1.829)


@pytest.mark.parametrize("tool", ["llama-completion", "llama-lookup"])
def test_a_log_without_timings_is_an_error_naming_the_tool(tool):
    with pytest.raises(ValueError, match=tool):
        parse_timing(tool, "error: failed to load model\n")


def test_a_missing_tool_says_how_to_build_it(tmp_path):
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    config = PeerConfig(model=gguf, threads=1, context=256, eos_token_ids=(2,), llama_cpp_bin=tmp_path / "bin")
    for name in ("llama.cpp-native", "llama.cpp-native-lookup"):
        assert name in PEERS
        reason = peer_missing_reason(name, config)
        assert reason is not None
        assert "not installed" in reason or "setup_bench_peers.sh" in reason


TOOLS_BIN = Path(os.environ.get("MTPEDGE_LLAMA_CPP_BIN", DEFAULT_BIN)).absolute()


@pytest.mark.slow
@pytest.mark.skipif(not (TOOLS_BIN / "llama-completion").is_file() or not importlib.util.find_spec("llama_cpp"),
                    reason="llama.cpp's tools are not built (scripts/setup_bench_peers.sh)")
@pytest.mark.parametrize("name", ["llama.cpp-native", "llama.cpp-native-lookup"])
def test_the_native_tools_answer_a_chat_prompt_with_the_same_prompt_tokens(name):
    from mtpedge.bench.peers import make_peer
    from mtpedge.models.loading import default_model_path

    gguf = default_model_path()
    peer = make_peer(name, PeerConfig(model=gguf, threads=1, context=512, eos_token_ids=(2,),
                                      llama_cpp_bin=TOOLS_BIN))
    try:
        prompt = "<|im_start|>user\nName three primary colours.<|im_end|>\n<|im_start|>assistant\n"
        ids = peer.vocab.tokenize(prompt.encode(), add_bos=False, special=True)
        run = peer.generate(ids, 24)
    finally:
        peer.close()
    assert 1 < run.new_tokens <= 24 and run.tokens_per_s > 0
    assert run.extra["prompt_tokens_native"] == len(ids), run.extra  # the tool read exactly the prompt given


def test_the_tools_are_looked_for_in_the_venv_whatever_the_working_directory(tmp_path, monkeypatch):
    # setup_bench_peers.sh builds them in .venv/llama.cpp/bin; a bench run from another folder used to look for
    # ./.venv/llama.cpp/bin there and call them missing
    import sys

    from mtpedge.bench.peers.llama_cpp_native import native_missing_reason

    monkeypatch.chdir(tmp_path)
    assert DEFAULT_BIN == Path(sys.prefix) / "llama.cpp" / "bin" and DEFAULT_BIN.is_absolute()
    reason = native_missing_reason("llama.cpp-native", None)
    assert reason is None or str(Path(sys.prefix)) in reason

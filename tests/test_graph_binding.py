"""Graph calls through onnxruntime's I/O binding (bound host cache, preallocated outputs) equal plain runs."""

from __future__ import annotations

import numpy as np

from mtpedge.runtime.engine import Engine
from mtpedge.runtime.generate import generate


def test_bound_calls_equal_plain_session_runs_call_for_call(tiny_bundle):
    bound, plain = (Engine.load(tiny_bundle("llama"), threads=1, bind_io=b) for b in (True, False))
    rng = np.random.default_rng(0)
    prompt = rng.integers(0, bound.config.vocab_size, size=23).tolist()
    np.testing.assert_array_equal(bound.prefill(prompt), plain.prefill(prompt))
    for width in (1, 8, 5, 1, 32):  # the same graph again after others: its buffers are reused
        outs = [e.run_block(e.embed(np.arange(width)), np.arange(-1, width - 1)) for e in (bound, plain)]
        np.testing.assert_array_equal(outs[0].logits, outs[1].logits)
        for a, b in zip(outs[0].new_keys + outs[0].new_values, outs[1].new_keys + outs[1].new_values, strict=True):
            np.testing.assert_array_equal(a, b)
        for engine, out in zip((bound, plain), outs, strict=True):  # the cache the next call reads changes in place
            engine.cache.commit_accepted_kv(out.new_keys, out.new_values, np.arange(width))


def test_logits_survive_the_next_call_of_the_same_graph(tiny_bundle):
    engine = Engine.load(tiny_bundle("llama"), threads=1)
    engine.prefill([5, 6, 7])
    first = engine.run_block(engine.embed(np.array([1])), np.array([-1]))
    kept = first.logits.copy()
    engine.run_block(engine.embed(np.array([2])), np.array([-1]))
    np.testing.assert_array_equal(first.logits, kept)


def test_greedy_decoding_is_the_same_with_and_without_binding(tiny_bundle):
    bound, plain = (Engine.load(tiny_bundle("qwen2"), threads=1, bind_io=b) for b in (True, False))
    prompt = list(range(3, 40))
    assert generate(bound, prompt, 40, stop_token_ids=set()).token_ids == \
        generate(plain, prompt, 40, stop_token_ids=set()).token_ids

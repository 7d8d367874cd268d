"""Batched self-distillation: the same answers as one-at-a-time greedy decoding, the teacher's top-k beside
each token, sampled answers that do not depend on their batch, and a run that resumes to the same data."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from mtpedge.models.distill_batch import BatchedGenerator, GenerationConfig, Request
from mtpedge.models.distill_data import load_distill_data, load_distill_prompts, make_distill_data
from mtpedge.models.distill_run import DistillPlan, DistillRun
from mtpedge.models.loading import load_model
from mtpedge.runtime.engine import Engine

PROMPTS = ["Tell me about kites.", "The quick brown fox", "Numbers like 12, 345 and 6789 appear.", "def add(a, b)",
           "Questions? Answers!", "Lists: one, two, three.", "x", "The end of the story is near. Tell me more."]


@pytest.fixture(scope="module")
def tiny(tiny_model_dir):
    return load_model(tiny_model_dir("llama"))


@pytest.fixture(scope="module")
def reference(tiny_bundle):
    """Today's generator: one sequence at a time on the exported ONNX graphs, 24 greedy tokens each."""
    engine = Engine.load(tiny_bundle("llama"))
    return engine, make_distill_data(engine, PROMPTS, max_new_tokens=24)


def frequent_token(samples) -> int:
    """A token most answers contain: used as a stand-in stop token, so rows end at different steps."""
    counts = np.bincount(np.concatenate([s.response_ids for s in samples]))
    return int(counts.argmax())


@pytest.mark.parametrize("refill", [True, False])
def test_batched_greedy_equals_one_at_a_time_greedy(tiny, reference, refill):
    _, samples = reference
    stop = frequent_token(samples)
    generator = BatchedGenerator(tiny.decoder, [stop], GenerationConfig(max_new_tokens=24, batch=3, refill=refill))
    answers = generator.generate([Request(s.prompt_ids.tolist()) for s in samples])
    lengths = set()
    for sample, answer in zip(samples, answers, strict=True):
        expected = sample.response_ids.tolist()
        if stop in expected:  # the same greedy answer, ended at the stand-in stop token
            expected = expected[: expected.index(stop)]
        assert answer.response_ids.tolist() == expected
        assert answer.stopped == (len(expected) < 24)
        lengths.add(len(expected))
    assert len(lengths) >= 3, "the rows should finish at different steps for this test to mean something"


def test_full_length_answers_equal_the_onnx_generator(tiny, reference):
    _, samples = reference
    generator = BatchedGenerator(tiny.decoder, tiny.stop_token_ids, GenerationConfig(max_new_tokens=24, batch=5))
    answers = generator.generate([Request(s.prompt_ids.tolist()) for s in samples])
    assert [a.response_ids.tolist() for a in answers] == [s.response_ids.tolist() for s in samples]


def test_top_k_is_the_teachers_distribution(tiny, reference):
    _, samples = reference
    sample = samples[0]
    [answer] = BatchedGenerator(tiny.decoder, tiny.stop_token_ids,
                                GenerationConfig(max_new_tokens=24, batch=4, top_k=5)).generate(
        [Request(sample.prompt_ids.tolist())])
    tokens = torch.from_numpy(np.concatenate([sample.prompt_ids, answer.response_ids]))
    cfg = tiny.decoder.cfg
    from mtpedge.models.mtp_layout import causal_bias
    from mtpedge.runtime.rope import inverse_frequencies, rope_tables

    cos, sin = rope_tables(np.arange(len(tokens)), inverse_frequencies(cfg.rope, cfg.head_dim))
    empty = [torch.zeros(1, cfg.num_kv_heads, 0, cfg.head_dim)] * (2 * cfg.num_layers)
    with torch.no_grad():
        logits = tiny.decoder(tiny.decoder.model.embed_tokens(tokens)[None], torch.from_numpy(causal_bias(len(tokens))),
                              torch.from_numpy(cos), torch.from_numpy(sin), None, *empty)[0][0]
    probs = torch.softmax(logits[len(sample.prompt_ids) - 1: -1], dim=-1)  # the positions that chose each answer token
    top_probs, top_ids = torch.topk(probs, 5, dim=-1)
    assert answer.topk_ids.shape == (24, 5) and answer.topk_ids.dtype == np.int32
    assert answer.topk_probs.dtype == np.float16
    np.testing.assert_array_equal(answer.topk_ids, top_ids.numpy())
    np.testing.assert_allclose(answer.topk_probs.astype(np.float32), top_probs.numpy(), rtol=2e-3, atol=1e-4)
    assert (answer.topk_ids[:, 0] == answer.response_ids).all()  # greedy: the most likely token was chosen


def test_sampled_answers_do_not_depend_on_their_batch(tiny, reference):
    _, samples = reference
    config = GenerationConfig(max_new_tokens=24, batch=4)
    generator = BatchedGenerator(tiny.decoder, tiny.stop_token_ids, config)
    sampled = Request(samples[2].prompt_ids.tolist(), temperature=1.0, seed=7)
    others = [Request(s.prompt_ids.tolist(), temperature=0.8, seed=i) for i, s in enumerate(samples[3:])]
    alone = generator.generate([sampled])[0].response_ids.tolist()
    in_batch = generator.generate([*others[:2], sampled, *others[2:]])[2].response_ids.tolist()
    again_other_seed = generator.generate([dataclasses.replace(sampled, seed=8)])[0].response_ids.tolist()
    assert alone == in_batch
    assert alone != samples[2].response_ids.tolist()  # not the greedy answer
    assert alone != again_other_seed


def test_bad_requests_are_refused(tiny):
    generator = BatchedGenerator(tiny.decoder, tiny.stop_token_ids, GenerationConfig(max_new_tokens=4))
    with pytest.raises(ValueError, match="empty prompt"):
        generator.generate([Request([])])
    with pytest.raises(ValueError, match=">= 1"):
        GenerationConfig(batch=0)


SMALL_PLAN = DistillPlan(question_prompts=6, topic_prompts=10, math=4, puzzles=3, code=3, translations=3, roles=3,
                         self_made=4, follow_ups=4, documents=4, min_answer_tokens=2)


def small_run(model, folder, **kwargs) -> DistillRun:
    generation = GenerationConfig(max_new_tokens=12, batch=4, top_k=4)
    return DistillRun(folder, SMALL_PLAN, generation, shard_size=5, model=model, spec_filter=None, **kwargs)


def test_interrupted_run_resumes_to_the_same_data(tiny, reference, tmp_path):
    # a stand-in stop token, so answers end early and the second stage (built on stopped answers) has work
    model = dataclasses.replace(tiny, stop_token_ids=[frequent_token(reference[1])])
    assert small_run(model, tmp_path / "whole").run() > 4
    assert small_run(model, tmp_path / "cut").run(stop_after_shards=3) == 3
    out_of_time = small_run(model, tmp_path / "cut")
    assert out_of_time.run(time_limit=1e-9) == 0 and not out_of_time.complete  # stops before its first new shard
    rest = small_run(model, tmp_path / "cut")
    assert rest.run() > 0 and rest.complete
    assert small_run(model, tmp_path / "cut").run() == 0  # nothing left to do
    whole, cut = load_distill_data(tmp_path / "whole"), load_distill_data(tmp_path / "cut")
    assert len(whole) == len(cut) >= 30
    for a, b in zip(whole, cut, strict=True):
        assert a.token_ids.tolist() == b.token_ids.tolist()
        np.testing.assert_array_equal(a.topk_ids, b.topk_ids)
        np.testing.assert_array_equal(a.topk_probs, b.topk_probs)
    assert load_distill_prompts(tmp_path / "whole") == load_distill_prompts(tmp_path / "cut")
    files = sorted(p.name for p in (tmp_path / "cut").iterdir())
    assert any(f.startswith("second-") for f in files) and not any(f.startswith(".") for f in files)


def test_a_run_with_other_settings_is_refused(tiny, tmp_path):
    small_run(tiny, tmp_path).run(stop_after_shards=1)
    other = DistillRun(tmp_path, dataclasses.replace(SMALL_PLAN, seed=1), GenerationConfig(max_new_tokens=12, batch=4,
                       top_k=4), shard_size=5, model=tiny, spec_filter=None)
    with pytest.raises(ValueError, match="other settings.*plan"):
        other.run()

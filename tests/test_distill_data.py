"""Self-distilled training data: the model's own greedy answers, saved atomically and resumable."""

from __future__ import annotations

import numpy as np
import pytest

from mtpedge.bench.questions import all_turns
from mtpedge.models.distill_data import (
    DistillSample,
    build_distill_file,
    load_distill_data,
    load_distill_prompts,
    make_distill_data,
    save_distill_data,
)
from mtpedge.models.distill_prompts import prompt_set
from mtpedge.runtime.engine import Engine
from mtpedge.runtime.generate import generate


def test_prompt_set_is_distinct_and_bounded():
    prompts = prompt_set(960)
    assert len(set(prompts)) == 960
    assert prompt_set(5) == prompts[:5]
    with pytest.raises(ValueError, match="between 1 and 960"):
        prompt_set(961)


def test_prompts_are_not_spec_bench_questions():
    turns = {turn.strip() for turn in all_turns()}
    assert not turns & set(prompt_set(960))


def test_samples_are_the_models_own_greedy_answers(tiny_bundle):
    engine = Engine.load(tiny_bundle("llama"))
    [sample] = make_distill_data(engine, ["Tell me about kites."], max_new_tokens=12)
    expected = generate(engine, list(sample.prompt_ids), max_new_tokens=12).token_ids
    assert sample.response_ids.tolist() == expected
    assert sample.token_ids.tolist() == sample.prompt_ids.tolist() + expected


def test_save_load_round_trip(tmp_path):
    samples = [DistillSample(np.array([1, 2, 3]), np.array([4, 5])), DistillSample(np.array([6]), np.array([], int))]
    save_distill_data(samples, tmp_path / "d.npz", ["a", "b"])
    loaded = load_distill_data(tmp_path / "d.npz")
    assert [(s.prompt_ids.tolist(), s.response_ids.tolist()) for s in loaded] == [([1, 2, 3], [4, 5]), ([6], [])]
    assert load_distill_prompts(tmp_path / "d.npz") == ["a", "b"]
    assert [p.name for p in tmp_path.iterdir()] == ["d.npz"]  # no temp file left behind


def test_build_resumes_and_refuses_other_prompts(tiny_bundle, tmp_path):
    engine = Engine.load(tiny_bundle("llama"))
    path = tmp_path / "d.npz"
    prompts = prompt_set(3)
    assert build_distill_file(engine, prompts[:2], 6, path, save_every=1) == 2
    seen = []
    assert build_distill_file(engine, prompts, 6, path, progress=lambda done, total, _: seen.append(done)) == 3
    assert seen == [3]  # only the missing prompt was answered
    fresh = make_distill_data(engine, prompts, 6)
    assert [s.token_ids.tolist() for s in load_distill_data(path)] == [s.token_ids.tolist() for s in fresh]
    with pytest.raises(ValueError, match="other prompts"):
        build_distill_file(engine, prompt_set(4)[1:], 6, path)


def test_missing_file_names_the_fix(tmp_path):
    with pytest.raises(FileNotFoundError, match="mtpedge distill"):
        load_distill_data(tmp_path / "none.npz")

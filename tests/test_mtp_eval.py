"""Held-out τ from one teacher-forced pass equals the τ the runtime measures when it decodes; the paper's
sampler head, teacher top-k distillation and the in-training evaluation hook."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mtpedge.export.bundle_writer import ExportConfig, export_bundle
from mtpedge.models.distill_data import DistillSample
from mtpedge.models.loading import load_model
from mtpedge.models.mtp_adapter import MtpAdapter, MtpConfig, PaperSamplerHead
from mtpedge.models.mtp_eval import HeldOut, heldout_tau, make_heldout, simulate_calls
from mtpedge.models.mtp_training import TrainConfig, load_checkpoint, soft_cross_entropy, train
from mtpedge.runtime.drafters import make_drafter
from mtpedge.runtime.engine import Engine
from mtpedge.runtime.generate import accepted_drafts, generate
from tests.conftest import TINY_CONTEXT, TINY_DECODE_WIDTHS, TINY_PREFILL

PROMPTS = [[1, 5, 9, 2], [7, 7, 7, 7, 7, 7], [3, 14, 15, 92, 65, 35, 89], [42, 43], [11, 12, 13, 14, 15, 16, 17]]
ANSWER = 30


def test_step_simulation_counts_calls_like_the_runtime():
    # prompt of 4, answer of 6 (indices 4..9): prefill commits x4, the first call (no drafts) x5
    assert simulate_calls(dict.fromkeys(range(4, 8), 0), 4, 10) == (5, 0)  # one token per call
    assert simulate_calls(dict.fromkeys(range(4, 8), 3), 4, 10) == (2, 3)  # x6..x8 drafted, x9 the bonus
    # x6 + bonus x7, then x8, then x9 + one draft past the end (counted, as the runtime counts it)
    assert simulate_calls({4: 1, 6: 0, 7: 2}, 4, 10) == (4, 3)


@pytest.fixture(scope="module")
def trained(tiny_model_dir, tmp_path_factory):
    """A tiny adapter trained (briefly, hard) on the greedy answers it is then evaluated on, exported."""
    folder = tmp_path_factory.mktemp("mtp_eval")
    base = Engine.load(export_bundle(tiny_model_dir("llama"), folder / "base", ExportConfig(
        context=TINY_CONTEXT, prefill_width=TINY_PREFILL, decode_widths=TINY_DECODE_WIDTHS)), threads=1)
    # the reference runs past the budget, as make_heldout's does (the runtime counts drafts past the budget)
    answers = [np.array(generate(base, p, max_new_tokens=ANSWER + 4, stop_token_ids=set()).token_ids)
               for p in PROMPTS]
    heldout = HeldOut([np.array(p) for p in PROMPTS], answers, ANSWER)
    torch.manual_seed(0)
    torch.set_num_threads(1)
    adapter = MtpAdapter(load_model(tiny_model_dir("llama")).decoder, MtpConfig(k=3, rank=4))
    samples = [DistillSample(p, a) for p, a in zip(heldout.prompts, heldout.answers, strict=True)]
    train(adapter, samples, TrainConfig(steps=60, lr=1e-2, warmup=1, max_blocks=32, checkpoint_every=60),
          folder / "adapter.pt", {"name": "tiny"}, {})
    config = ExportConfig(context=TINY_CONTEXT, prefill_width=TINY_PREFILL, decode_widths=TINY_DECODE_WIDTHS,
                          mtp_adapter=str(folder / "adapter.pt"))
    engine = Engine.load(export_bundle(tiny_model_dir("llama"), folder / "bundle", config), threads=1)
    return adapter, heldout, engine


def runtime_tau(engine, heldout, **options) -> float:
    calls = accepted = 0
    for prompt, answer in zip(heldout.prompts, heldout.answers, strict=True):
        drafter = make_drafter("mtp", engine, mtp_layout="quadratic", **options)
        result = generate(engine, prompt.tolist(), max_new_tokens=ANSWER, stop_token_ids=set(), drafter=drafter)
        assert result.token_ids == answer[:ANSWER].tolist()  # lossless: the reference is what decoding outputs
        calls += result.stats.decode_calls
        accepted += accepted_drafts(result.stats.accepted_histogram)
    return 1.0 + accepted / calls


def test_heldout_tau_equals_the_runtimes_quadratic_tau(trained):
    adapter, heldout, engine = trained
    result = heldout_tau(adapter, heldout, candidates=(8, 0))
    assert result["tau_chain_full"] > 1.3, "the adapter should have learned something for this test to bite"
    assert result["tau_chain_full"] == pytest.approx(runtime_tau(engine, heldout, candidates=0), abs=1e-3)
    assert result["tau_chain_8"] == pytest.approx(runtime_tau(engine, heldout, candidates=8), abs=1e-3)
    assert result["tau_plain"] == pytest.approx(runtime_tau(engine, heldout, sampler=False), abs=1e-3)
    assert result["tau_top4"] >= result["tau_chain_full"]
    assert all(0 <= result[f"acc_m{j}"] <= 1 for j in (1, 2, 3))


def test_make_heldout_answers_greedily(tiny_model_dir, tiny_bundle):
    loaded = load_model(tiny_model_dir("llama"))
    held = make_heldout(loaded, ["Tell me about kites.", "x"], max_new_tokens=12)
    engine = Engine.load(tiny_bundle("llama"), threads=1)
    assert held.budget == 12
    for prompt, answer in zip(held.prompts, held.answers, strict=True):
        assert answer.tolist() == generate(engine, prompt.tolist(), max_new_tokens=12 + 9).token_ids


def test_paper_sampler_head_is_two_norm_blocks(tiny_model_dir):
    decoder = load_model(tiny_model_dir("llama")).decoder
    adapter = MtpAdapter(decoder, MtpConfig(k=2, rank=0, sampler_form="paper"))
    assert isinstance(adapter.sampler, PaperSamplerHead)
    out = adapter.sampler_hidden(torch.tensor([3, 4]), torch.randn(2, decoder.cfg.hidden_size))
    rms = out.pow(2).mean(-1).sqrt() / adapter.sampler.norm2.weight.pow(2).mean().sqrt()
    assert out.shape == (2, decoder.cfg.hidden_size) and torch.isfinite(out).all() and (rms > 0).all()
    with pytest.raises(ValueError, match="sampler form"):
        MtpConfig(sampler_form="deep")


def test_soft_cross_entropy_is_ce_against_the_renormalised_top_k():
    logits = torch.randn(3, 10)
    ids = torch.tensor([[1, 2], [0, 5], [9, 3]])
    probs = torch.tensor([[0.6, 0.2], [0.5, 0.5], [1.0, 0.0]])
    target = torch.zeros(3, 10).scatter(1, ids, probs / probs.sum(-1, keepdim=True))
    expected = -(target * torch.log_softmax(logits, -1)).sum(-1).mean()
    torch.testing.assert_close(soft_cross_entropy(logits, ids, probs), expected)
    hard = torch.tensor([[4, 0], [4, 1], [4, 2]])  # all mass on token 4 = plain CE
    torch.testing.assert_close(soft_cross_entropy(logits, hard, torch.tensor([[1.0, 0.0]] * 3)),
                               torch.nn.functional.cross_entropy(logits, torch.tensor([4, 4, 4])))


def test_training_with_teacher_targets_and_heldout_evaluation(tiny_model_dir, tmp_path):
    decoder = load_model(tiny_model_dir("llama")).decoder
    rng = np.random.default_rng(0)
    vocab = decoder.cfg.vocab_size
    samples = [DistillSample(rng.integers(0, vocab, 5), r := rng.integers(0, vocab, 14),
                             np.stack([r, (r + 1) % vocab], 1).astype(np.int32),
                             np.tile(np.array([0.7, 0.2], np.float16), (14, 1))) for _ in range(2)]
    heldout = HeldOut([s.prompt_ids for s in samples], [s.response_ids for s in samples], 10)
    torch.manual_seed(0)
    adapter = MtpAdapter(decoder, MtpConfig(k=2, rank=2, sampler_form="paper"))
    seen = []
    trainer = train(adapter, samples, TrainConfig(steps=6, warmup=1, max_blocks=6, teacher_weight=0.5, eval_every=3),
                    tmp_path / "a.pt", {"name": "tiny"}, {}, progress=seen.append,
                    evaluate=lambda a: heldout_tau(a, heldout, candidates=(0,)))
    assert [h["step"] for h in trainer.heldout] == [3, 6]
    assert {"tau_chain_full", "tau_plain", "acc_m1", "acc_m2"} <= set(trainer.heldout[-1])
    assert sum("heldout" in m for m in seen) == 2
    assert load_checkpoint(tmp_path / "a.pt")["heldout"] == trainer.heldout
    with pytest.raises(ValueError, match="teacher's top-k"):
        train(adapter, [DistillSample(s.prompt_ids, s.response_ids) for s in samples],
              TrainConfig(steps=1, teacher_weight=0.5), tmp_path / "b.pt", {}, {})


def test_teacher_targets_line_up_with_the_tokens_each_mask_predicts(tiny_model_dir):
    """A teacher that puts all its mass on the true next token gives exactly the hard-label loss."""
    from mtpedge.models.mtp_training import MtpTrainer

    rng = np.random.default_rng(3)
    vocab = load_model(tiny_model_dir("llama")).config.vocab_size
    response = rng.integers(0, vocab, 20)
    ids = np.stack([response, (response + 7) % vocab], 1).astype(np.int32)  # the true token first, prob 1
    sample = DistillSample(rng.integers(0, vocab, 30), response, ids, np.tile(np.float16([1, 0]), (20, 1)))
    losses = []
    for weight in (0.0, 1.0):
        torch.manual_seed(0)
        adapter = MtpAdapter(load_model(tiny_model_dir("llama")).decoder, MtpConfig(k=3, rank=2))
        trainer = MtpTrainer(adapter, TrainConfig(max_seq_len=24, max_blocks=8, teacher_weight=weight))
        losses.append(trainer.train_step(0, sample))  # the prompt is cut from the left to fit 24 tokens
    assert losses[0]["ce_mask"] == pytest.approx(losses[1]["ce_mask"], rel=1e-5)
    assert losses[0]["ce_sampler"] == pytest.approx(losses[1]["ce_sampler"], rel=1e-5)

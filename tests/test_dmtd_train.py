"""The DMTD model and its training on a tiny model: the gate, the two streams, training, resume and release."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from mtpedge.models.dmtd import (
    DmtdConfig,
    DmtdModel,
    base_logits,
    dmtd_logits,
    draft_windows,
    run_causal,
    tapped_states,
    two_stream_visibility,
)
from mtpedge.models.dmtd_train import TrainSettings, load_dmtd, train_dmtd, write_release
from mtpedge.models.schedule import learning_rate

CONFIG = DmtdConfig(decoding_layers=1, thinking_layers=1, lora_rank=4, lora_alpha=4.0)


def test_draft_windows_open_the_prompt_and_every_tau_th_position_after_it():
    assert draft_windows(10, 3, anchor=2).tolist() == [0, 1, 2, 2, 2, 5, 5, 5, 8, 8]
    assert draft_windows(5, 2, anchor=0).tolist() == [0, 0, 2, 2, 4]
    assert draft_windows(4, 1, anchor=0).tolist() == [0, 1, 2, 3]  # τ = 1: every position a head
    with pytest.raises(ValueError, match="τ"):
        draft_windows(5, 0, anchor=0)


def test_two_streams_see_what_inference_has_at_each_position():
    """Head-stream rows are causal over heads; a draft row sees heads up to its cycle's head and its own cycle's
    drafts up to itself (full refill: every earlier cycle is in the KV as heads)."""
    windows = draft_windows(6, 3, anchor=1)  # heads 0, 1, 4; drafts 2, 3 (cycle of 1) and 5 (cycle of 4)
    drafts, visible = two_stream_visibility(windows)
    assert drafts.tolist() == [2, 3, 5]
    heads, own = visible[:, :6], visible[:, 6:]
    assert (heads[:6] == np.tril(np.ones((6, 6), bool))).all() and not own[:6].any()
    assert heads[6].tolist() == [1, 1, 0, 0, 0, 0] and own[6].tolist() == [1, 0, 0]  # position 2
    assert heads[7].tolist() == [1, 1, 0, 0, 0, 0] and own[7].tolist() == [1, 1, 0]  # position 3
    assert heads[8].tolist() == [1, 1, 1, 1, 1, 0] and own[8].tolist() == [0, 0, 1]  # position 5


@pytest.fixture(scope="module")
def tiny_loaded(tiny_model_dir):
    from mtpedge.models.loading import load_model

    torch.manual_seed(0)
    return load_model(tiny_model_dir("llama"))


@pytest.fixture(scope="module")
def tiny_data(tiny_bundle, tmp_path_factory):
    """The tiny model's own greedy answers, with a one-hot teacher distribution from its logits."""
    from mtpedge.models.distill_data import DistillSample, make_distill_data, save_distill_data
    from mtpedge.runtime.engine import Engine

    engine = Engine.load(tiny_bundle("llama"), threads=1)
    samples = make_distill_data(engine, ["hello there", "count to ten", "a poem about rain"], max_new_tokens=24)
    samples = [DistillSample(s.prompt_ids, s.response_ids, s.response_ids[:, None].astype(np.int32),
                             np.ones((s.response_ids.size, 1), np.float16)) for s in samples]
    folder = tmp_path_factory.mktemp("distill")
    save_distill_data(samples, folder / "first-0000.npz")
    return folder


def test_an_untrained_model_with_every_position_a_head_is_the_base_model(tiny_loaded):
    """The gate passes h_think unchanged at a head, and the LoRA starts at zero: M = 1 everywhere IS the base."""
    decoder = tiny_loaded.decoder
    model = DmtdModel(decoder, CONFIG)
    ids = np.arange(3, 40, dtype=np.int64)
    with torch.no_grad():
        tapped = tapped_states(decoder, ids, model.tap)
        full = decoder.lm_head(decoder.model.norm(run_causal(decoder, decoder.model.layers, embed_rows(decoder, ids))))
        gated = dmtd_logits(decoder, model, ids, tapped, draft_windows(ids.size, 1, 0))
        assert torch.equal(gated, base_logits(decoder, tapped, model.tap))
        np.testing.assert_allclose(gated.numpy(), full[0].numpy(), atol=1e-5)
        # heads of a cyclic gate are base rows too, the drafts in between are not
        cyclic = dmtd_logits(decoder, model, ids, tapped, draft_windows(ids.size, 3, 5))
    heads = draft_windows(ids.size, 3, 5) == np.arange(ids.size)
    np.testing.assert_allclose(cyclic[heads].numpy(), full[0][heads].numpy(), atol=1e-5)
    assert not torch.allclose(cyclic[~heads], full[0][~heads], atol=1e-3)


def embed_rows(decoder, ids):
    return decoder.model.embed_tokens(torch.from_numpy(ids))[None]


def test_config_refuses_a_split_with_no_frozen_layer(tiny_loaded):
    with pytest.raises(ValueError, match="no frozen layer"):
        DmtdModel(tiny_loaded.decoder, DmtdConfig(decoding_layers=2, thinking_layers=1, lora_rank=4))
    with pytest.raises(ValueError, match="D >= 1"):
        DmtdConfig(decoding_layers=0)


def test_training_lowers_the_gated_loss_resume_is_exact_and_the_release_is_small(tiny_loaded, tiny_data, tmp_path):
    from mtpedge.models.distill_data import load_distill_data
    from mtpedge.models.dmtd_train import gated_loss

    settings = TrainSettings(model=CONFIG, taus=(2, 3), steps=6, lr=3e-3, warmup=1, checkpoint_every=3,
                             eval_every=0)
    straight = train_dmtd(tiny_loaded, tiny_data, tmp_path / "a", settings)
    train_dmtd(tiny_loaded, tiny_data, tmp_path / "b", settings, stop_at=3)
    resumed = train_dmtd(tiny_loaded, tiny_data, tmp_path / "b", settings, resume=True)
    model_a, state_a = load_dmtd(straight, tiny_loaded)
    model_b, state_b = load_dmtd(resumed, tiny_loaded)
    assert state_a["step"] == state_b["step"] == 6
    for (name, a), (_, b) in zip(model_a.trainable_state().items(), model_b.trainable_state().items(), strict=True):
        assert torch.equal(a, b), name
    # asked to go on longer when resumed, a run keeps the schedule it started with (issue 17 item 6)
    train_dmtd(tiny_loaded, tiny_data, tmp_path / "d", settings, stop_at=3)
    longer_resumed = train_dmtd(tiny_loaded, tiny_data, tmp_path / "d", dataclasses.replace(settings, steps=12),
                                resume=True, stop_at=6)
    model_d, state_d = load_dmtd(longer_resumed, tiny_loaded)
    assert state_d["step"] == 6 and state_d["lr_horizon"] == 6
    for (name, a), (_, d) in zip(model_a.trainable_state().items(), model_d.trainable_state().items(), strict=True):
        assert torch.equal(a, d), name
    # a horizon stated on resume replaces the checkpoint's: the rate goes on along the new cosine
    restated = dataclasses.replace(settings, steps=8, lr_horizon=12)
    _, state_e = load_dmtd(train_dmtd(tiny_loaded, tiny_data, tmp_path / "d", restated, resume=True), tiny_loaded)
    assert state_e["step"] == 8 and state_e["lr_horizon"] == 12
    last_rate = state_e["optimizer"]["param_groups"][0]["lr"]
    assert last_rate == pytest.approx(learning_rate(7, settings.lr, settings.warmup, 12))
    assert last_rate > 2 * learning_rate(7, settings.lr, settings.warmup, 6)  # the old horizon's floor
    with pytest.raises(ValueError, match="--lr-horizon 8 is not past"):
        train_dmtd(tiny_loaded, tiny_data, tmp_path / "d", dataclasses.replace(restated, lr_horizon=8), resume=True)
    with pytest.raises(ValueError, match="--resume"):
        train_dmtd(tiny_loaded, tiny_data, tmp_path / "a", settings)
    other = TrainSettings(model=DmtdConfig(decoding_layers=2, thinking_layers=0, lora_rank=4), steps=8)
    with pytest.raises(ValueError, match="--decoding-layers"):
        train_dmtd(tiny_loaded, tiny_data, tmp_path / "b", other, resume=True)

    longer = TrainSettings(model=CONFIG, taus=(2,), steps=40, lr=3e-3, warmup=1, eval_every=0, checkpoint_every=40)
    trained, _ = load_dmtd(train_dmtd(tiny_loaded, tiny_data, tmp_path / "c", longer), tiny_loaded)
    sample = load_distill_data(tiny_data)[0]
    tokens = np.concatenate([sample.prompt_ids, sample.response_ids])
    p_len = sample.prompt_ids.size
    decoder = tiny_loaded.decoder
    with torch.no_grad():
        before = gated_loss(decoder, DmtdModel(decoder, CONFIG), tokens, p_len, sample,
                            tapped_states(decoder, tokens, 1), 2, p_len - 1)
        after = gated_loss(decoder, trained, tokens, p_len, sample, tapped_states(decoder, tokens, 1), 2, p_len - 1)
    assert after < before

    release = tmp_path / "release.pt"
    write_release(tmp_path / "c" / "dmtd.pt", release, tiny_loaded)
    shipped, state = load_dmtd(release, tiny_loaded)
    assert state["optimizer"] is None and all(v.dtype == torch.float16 for v in state["dmtd"].values())
    with torch.no_grad():
        tapped = tapped_states(decoder, tokens, 1)
        windows = draft_windows(tokens.size, 2, p_len - 1)
        np.testing.assert_allclose(dmtd_logits(decoder, shipped, tokens, tapped, windows).numpy(),
                                   dmtd_logits(decoder, trained, tokens, tapped, windows).numpy(), atol=2e-2)


def test_rank_0_trains_every_weight_of_the_copy_and_leaves_the_base_alone(tiny_loaded, tiny_data, tmp_path):
    """The paper's form: no LoRA, the copied layers' own weights train; the base model's weights do not move,
    and the exported layers are the trained ones."""
    decoder = tiny_loaded.decoder
    base_before = {name: p.detach().clone() for name, p in decoder.named_parameters()}
    full = DmtdConfig(decoding_layers=1, thinking_layers=1, lora_rank=0)
    untrained = DmtdModel(decoder, full)
    assert {name for name, p in untrained.named_parameters() if not p.requires_grad} == set()
    settings = TrainSettings(model=full, taus=(2,), steps=4, lr=3e-3, warmup=1, eval_every=0, checkpoint_every=4)
    trained, _ = load_dmtd(train_dmtd(tiny_loaded, tiny_data, tmp_path / "full", settings), tiny_loaded)
    for name, p in decoder.named_parameters():
        assert torch.equal(p, base_before[name]), name
    moved = trained.decode[0].mlp.down_proj.weight
    assert not torch.equal(moved, decoder.model.layers[-1].mlp.down_proj.weight)
    _, decode = trained.merged_layers()
    assert torch.equal(decode[0].mlp.down_proj.weight, moved)


def test_a_new_run_starts_from_a_trained_model_and_rank_0_folds_its_lora_in(tiny_loaded, tiny_data, tmp_path):
    lora = DmtdConfig(decoding_layers=1, thinking_layers=1, lora_rank=4)
    settings = TrainSettings(model=lora, taus=(2,), steps=4, lr=3e-3, warmup=1, eval_every=0, checkpoint_every=4)
    source = train_dmtd(tiny_loaded, tiny_data, tmp_path / "lora", settings)
    trained, _ = load_dmtd(source, tiny_loaded)
    ids = np.arange(3, 30, dtype=np.int64)
    decoder = tiny_loaded.decoder
    with torch.no_grad():
        tapped = tapped_states(decoder, ids, trained.tap)
        windows = draft_windows(ids.size, 3, 4)
        expected = dmtd_logits(decoder, trained, ids, tapped, windows)
        for config in (lora, dataclasses.replace(lora, lora_rank=0)):
            started = DmtdModel(decoder, config, seed=1)
            started.start_from(trained)
            np.testing.assert_allclose(dmtd_logits(decoder, started, ids, tapped, windows).numpy(), expected.numpy(),
                                       atol=1e-5)
    with pytest.raises(ValueError, match="same configuration"):
        DmtdModel(decoder, dataclasses.replace(lora, lora_rank=8)).start_from(trained)
    # through the trainer: step 0 of a run with init is the source model
    full = dataclasses.replace(settings, model=dataclasses.replace(lora, lora_rank=0), steps=0, init=str(source))
    started, _ = load_dmtd(train_dmtd(tiny_loaded, tiny_data, tmp_path / "full", full), tiny_loaded)
    with torch.no_grad():
        np.testing.assert_allclose(dmtd_logits(decoder, started, ids, tapped, windows).numpy(), expected.numpy(),
                                   atol=1e-5)


def test_a_checkpoint_is_refused_for_another_base_model(tiny_loaded, tiny_model_dir, tiny_data, tmp_path):
    from mtpedge.models.loading import load_model

    ckpt = train_dmtd(tiny_loaded, tiny_data, tmp_path, TrainSettings(model=CONFIG, steps=1, eval_every=0))
    with pytest.raises(ValueError, match="was trained on"):
        load_dmtd(ckpt, load_model(tiny_model_dir("qwen2")))


def test_a_run_cut_short_gets_its_final_figures_when_resumed_at_the_step_it_reached(tiny_loaded, tiny_data,
                                                                                     tmp_path):
    calls = []

    def evaluate(model):
        calls.append(1)
        return {"figure": float(len(calls))}

    planned = TrainSettings(model=CONFIG, steps=6, lr=3e-3, warmup=1, checkpoint_every=2, eval_every=2)
    train_dmtd(tiny_loaded, tiny_data, tmp_path, planned, stop_at=3, evaluate=evaluate)  # figures at step 2 only
    ended = TrainSettings(**{**planned.__dict__, "steps": 3})
    _, state = load_dmtd(train_dmtd(tiny_loaded, tiny_data, tmp_path, ended, resume=True, evaluate=evaluate),
                         tiny_loaded)
    assert state["step"] == 3 and [h["step"] for h in state["heldout"]] == [2, 3]
    train_dmtd(tiny_loaded, tiny_data, tmp_path, ended, resume=True, evaluate=evaluate)  # nothing new to measure
    assert len(calls) == 2


def test_a_time_limited_run_stops_at_its_limit_with_its_final_figures(tiny_loaded, tiny_data, tmp_path, monkeypatch):
    from mtpedge.models import dmtd_train, schedule

    class FakeTime:
        now = 0.0

        def perf_counter(self) -> float:
            return self.now

    clock = FakeTime()
    monkeypatch.setattr(schedule, "time", clock)
    optimise = dmtd_train._optimise

    def step_taking_a_second(*args):
        clock.now += 1.0
        return optimise(*args)

    monkeypatch.setattr(dmtd_train, "_optimise", step_taking_a_second)
    settings = TrainSettings(model=CONFIG, steps=50, lr=3e-3, warmup=1, checkpoint_every=40, eval_every=40,
                             time_limit=3.0)
    _, state = load_dmtd(train_dmtd(tiny_loaded, tiny_data, tmp_path, settings, evaluate=lambda m: {"figure": 1.0}),
                         tiny_loaded)
    assert state["step"] == 3 and state["trained_seconds"] == 3.0
    assert [h["step"] for h in state["heldout"]] == [3]  # the end of a time-limited run is measured
    assert state["optimizer"]["param_groups"][0]["lr"] == pytest.approx(learning_rate(2, 3e-3, 1, 50, 2 / 3))


def test_bfloat16_forward_passes_train_float32_weights_to_the_same_loss(tiny_loaded, tiny_data, tmp_path):
    losses = {}
    for precision in ("float32", "bfloat16"):
        settings = TrainSettings(model=CONFIG, steps=2, lr=3e-3, warmup=1, checkpoint_every=2, precision=precision)
        model, state = load_dmtd(train_dmtd(tiny_loaded, tiny_data, tmp_path / precision, settings), tiny_loaded)
        losses[precision] = [loss for _, loss, _ in state["history"]]
        assert {value.dtype for value in model.trainable_state().values()} == {torch.float32}
    assert losses["bfloat16"][0] == pytest.approx(losses["float32"][0], rel=0.02)
    assert losses["bfloat16"][0] != losses["float32"][0]  # autocast was on
    with pytest.raises(ValueError, match="precision must be one of"):
        TrainSettings(precision="float16")

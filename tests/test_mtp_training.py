"""The multi-token adapter's model side: layout, gate-0 identity with the base, training and resuming."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mtpedge.models.distill_data import DistillSample
from mtpedge.models.mtp_adapter import MtpAdapter, MtpConfig
from mtpedge.models.mtp_layout import IGNORE, block_owners, causal_bias, mask_block_layout
from mtpedge.models.mtp_training import MtpTrainer, TrainConfig, load_checkpoint, train
from mtpedge.runtime.rope import inverse_frequencies, rope_tables


@pytest.fixture()
def tiny_decoder(tiny_model_dir):
    from mtpedge.models.loading import load_model

    torch.set_num_threads(1)
    return load_model(tiny_model_dir("llama")).decoder


def test_layout_follows_the_attention_rule():
    tokens = np.array([10, 11, 12, 13, 14, 15])
    layout = mask_block_layout(tokens, np.array([1, 3]), k=2)
    visible = layout.bias[0, 0] == 0
    # block of owner 1: sees tokens 0..1; mask 2 also sees mask 1 of its own block, never the other block
    assert visible[0].tolist() == [1, 1, 0, 0, 0, 0] + [1, 0, 0, 0]
    assert visible[1].tolist() == [1, 1, 0, 0, 0, 0] + [1, 1, 0, 0]
    assert visible[3].tolist() == [1, 1, 1, 1, 0, 0] + [0, 0, 1, 1]
    assert layout.positions.tolist() == [2, 3, 4, 5]
    assert layout.targets.tolist() == [13, 14, 15, IGNORE]  # mask j after x_t predicts x_{t+2+j}
    assert layout.prev_tokens.tolist() == [12, 13, 14, 15]
    assert layout.ntp_rows.tolist() == [2, 3, 4, -1]


def test_block_owners_cover_the_response():
    owners = block_owners(prompt_len=3, total_len=8, max_blocks=None, rng=np.random.default_rng(0))
    assert owners.tolist() == [2, 3, 4, 5]
    sub = block_owners(3, 8, 2, np.random.default_rng(0))
    assert sub.size == 2 and set(sub.tolist()) <= {2, 3, 4, 5} and sub.tolist() == sorted(sub.tolist())


def _rope(decoder, positions):
    cos, sin = rope_tables(np.asarray(positions), inverse_frequencies(decoder.cfg.rope, decoder.cfg.head_dim))
    return torch.from_numpy(cos), torch.from_numpy(sin)


def _empty_past(decoder):
    cfg = decoder.cfg
    return [torch.zeros(1, cfg.num_kv_heads, 0, cfg.head_dim)] * (2 * cfg.num_layers)


def test_gate_zero_is_the_base_model_exactly(tiny_decoder):
    tokens = torch.arange(3, 12)
    t = tokens.numel()
    bias, (cos, sin) = torch.from_numpy(causal_bias(t)), _rope(tiny_decoder, np.arange(t))
    embeds = tiny_decoder.model.embed_tokens(tokens)[None].detach()
    with torch.no_grad():
        base_logits = tiny_decoder(embeds, bias, cos, sin, None, *_empty_past(tiny_decoder))[0]
        adapter = MtpAdapter(tiny_decoder, MtpConfig(k=2, rank=4))
        for module in adapter.lora.values():  # a trained-looking LoRA, so that a leak would show
            module.lora_B.normal_()
        for gate in (None, torch.zeros(1, t)):
            hidden, _ = adapter.run(embeds, bias, cos, sin, _empty_past(tiny_decoder), gate)
            assert torch.equal(adapter.unembed(hidden), base_logits)
        hidden, _ = adapter.run(embeds, bias, cos, sin, _empty_past(tiny_decoder), torch.ones(1, t))
        assert not torch.allclose(adapter.unembed(hidden), base_logits)


def test_mask_block_equals_masks_appended_to_a_prefix(tiny_decoder):
    """The batched layout (all blocks in one call over the token cache) = each block run as a plain chain."""
    torch.manual_seed(0)
    adapter = MtpAdapter(tiny_decoder, MtpConfig(k=3, rank=4))
    with torch.no_grad():
        for module in adapter.lora.values():
            module.lora_B.normal_(std=0.1)
        adapter.masks.normal_()
    tokens = np.arange(20, 32)
    t = tokens.size
    embeds = tiny_decoder.model.embed_tokens(torch.from_numpy(tokens))[None].detach()
    with torch.no_grad():
        _, kv = adapter.run(embeds, torch.from_numpy(causal_bias(t)), *_rope(tiny_decoder, np.arange(t)),
                            _empty_past(tiny_decoder), None)
        owners = np.array([2, 5, 9])
        layout = mask_block_layout(tokens, owners, 3)
        batched, _ = adapter.run(adapter.masks.repeat(3, 1)[None], torch.from_numpy(layout.bias),
                                 *_rope(tiny_decoder, layout.positions), kv, torch.ones(1, 9))
        for b, owner in enumerate(owners):
            chain = torch.cat([embeds[0, : owner + 1], adapter.masks])[None]
            n = owner + 4
            gate = torch.zeros(1, n)
            gate[0, owner + 1:] = 1
            hidden, _ = adapter.run(chain, torch.from_numpy(causal_bias(n)), *_rope(tiny_decoder, np.arange(n)),
                                    _empty_past(tiny_decoder), gate)
            torch.testing.assert_close(batched[0, 3 * b: 3 * b + 3], hidden[0, -3:], atol=1e-5, rtol=1e-5)


def _samples(vocab: int, count: int = 4) -> list[DistillSample]:
    rng = np.random.default_rng(1)
    return [DistillSample(rng.integers(0, vocab, 5), rng.integers(0, vocab, 14)) for _ in range(count)]


def test_training_lowers_the_loss_and_resume_continues_exactly(tiny_model_dir, tmp_path):
    from mtpedge.models.loading import load_model

    torch.set_num_threads(1)
    samples = _samples(load_model(tiny_model_dir("llama")).config.vocab_size, 2)
    config = TrainConfig(steps=30, lr=1e-2, warmup=1, max_blocks=8, checkpoint_every=10)
    info = {"name": "tiny"}

    def fresh():
        torch.manual_seed(0)
        return MtpAdapter(load_model(tiny_model_dir("llama")).decoder, MtpConfig(k=2, rank=4))

    full = train(fresh(), samples, config, tmp_path / "full.pt", info, info)
    losses = [m["loss"] for m in full.history]
    assert np.mean(losses[-4:]) < 0.8 * np.mean(losses[:4])
    half = TrainConfig(**{**config.__dict__, "steps": 14})
    train(fresh(), samples, half, tmp_path / "half.pt", info, info)
    resumed = train(fresh(), samples, config, tmp_path / "half.pt", info, info, resume=load_checkpoint(
        tmp_path / "half.pt"))
    assert resumed.step == 30
    end_full, end_resumed = load_checkpoint(tmp_path / "full.pt"), load_checkpoint(tmp_path / "half.pt")
    for name, value in end_full["state"].items():
        torch.testing.assert_close(end_resumed["state"][name], value, atol=1e-6, rtol=1e-5)


def test_masks_only_adapter_has_only_mask_parameters(tiny_decoder):
    adapter = MtpAdapter(tiny_decoder, MtpConfig(k=3, rank=0, sampler=False))
    assert list(adapter.trainable_state()) == ["masks"]


def test_cosine_schedule_warms_up_then_decays_to_a_tenth_and_stays(tiny_decoder):
    adapter = MtpAdapter(tiny_decoder, MtpConfig(k=2, rank=2))
    trainer = MtpTrainer(adapter, TrainConfig(lr=1e-3, warmup=10, cosine_steps=100))
    assert trainer.lr_at(0) == pytest.approx(1e-4 * (0.1 + 0.9 * 0.5 * (1 + np.cos(0.0))))
    assert trainer.lr_at(50) == pytest.approx(1e-3 * 0.55)
    assert trainer.lr_at(100) == pytest.approx(1e-4) and trainer.lr_at(500) == pytest.approx(1e-4)
    lrs = [trainer.lr_at(s) for s in range(10, 101)]
    assert all(a >= b for a, b in zip(lrs, lrs[1:], strict=False))
    constant = MtpTrainer(adapter, TrainConfig(lr=1e-3, warmup=10))
    assert constant.lr_at(9) == constant.lr_at(5000) == pytest.approx(1e-3)


def test_release_copy_is_float16_without_optimizer_and_loads_as_the_adapter(tiny_model_dir, tmp_path):
    from mtpedge.models.loading import load_model
    from mtpedge.models.mtp_training import adapter_from_checkpoint, write_release_copy

    decoder = load_model(tiny_model_dir("llama")).decoder
    samples = _samples(decoder.cfg.vocab_size, 2)
    torch.manual_seed(0)
    train(MtpAdapter(decoder, MtpConfig(k=2, rank=4)), samples, TrainConfig(steps=3, warmup=1, max_blocks=4),
          tmp_path / "a.pt", {"name": "tiny"}, {})
    size = write_release_copy(tmp_path / "a.pt", tmp_path / "release.pt")
    assert size == (tmp_path / "release.pt").stat().st_size < (tmp_path / "a.pt").stat().st_size / 3
    full, release = load_checkpoint(tmp_path / "a.pt"), load_checkpoint(tmp_path / "release.pt")
    assert release["optimizer"] is None and release["step"] == 3 and len(release["history"]) == 1
    loaded = adapter_from_checkpoint(load_model(tiny_model_dir("llama")).decoder, release).trainable_state()
    for name, value in full["state"].items():
        assert release["state"][name].dtype == torch.float16 and loaded[name].dtype == torch.float32
        torch.testing.assert_close(loaded[name], value.to(torch.float16).float())
    assert not list(tmp_path.glob(".*partial*"))


def test_start_from_loads_a_release_copy_and_refuses_another_config_or_base(tiny_model_dir, tmp_path):
    from mtpedge.models.loading import load_model
    from mtpedge.models.mtp_training import start_from, write_release_copy

    loaded = load_model(tiny_model_dir("llama"))
    info = {"name": "tiny", "source_sha256": loaded.source_sha256}
    torch.manual_seed(0)
    train(MtpAdapter(loaded.decoder, MtpConfig(k=2, rank=4)), _samples(loaded.config.vocab_size, 2),
          TrainConfig(steps=3, warmup=1, max_blocks=4), tmp_path / "a.pt", info, {})
    write_release_copy(tmp_path / "a.pt", tmp_path / "release.pt")
    release = load_checkpoint(tmp_path / "release.pt")
    torch.manual_seed(1)
    fresh = MtpAdapter(load_model(tiny_model_dir("llama")).decoder, MtpConfig(k=2, rank=4))  # one adapter a decoder
    start_from(fresh, release, loaded.source_sha256)
    for name, value in fresh.trainable_state().items():
        assert value.dtype == torch.float32
        torch.testing.assert_close(value, release["state"][name].float())
    with pytest.raises(ValueError, match="--k / --rank"):
        start_from(MtpAdapter(load_model(tiny_model_dir("llama")).decoder, MtpConfig(k=3, rank=4)), release,
                   loaded.source_sha256)
    with pytest.raises(ValueError, match="not on this base model"):
        start_from(fresh, release, "another")


class FakeTime:
    """A stand-in for the `time` module of models/schedule.py: seconds pass only when a test says so."""

    def __init__(self) -> None:
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now


def test_a_time_limited_run_stops_at_its_limit_with_the_cosine_laid_over_its_time(tiny_model_dir, tmp_path,
                                                                                    monkeypatch):
    from mtpedge.models import schedule
    from mtpedge.models.loading import load_model
    from mtpedge.models.schedule import learning_rate

    clock = FakeTime()
    monkeypatch.setattr(schedule, "time", clock)
    one_step = MtpTrainer.train_step

    def step_taking_a_second(self, index, sample):
        metrics = one_step(self, index, sample)  # its rate is set as it starts
        clock.now += 1.0
        return metrics

    monkeypatch.setattr(MtpTrainer, "train_step", step_taking_a_second)
    config = TrainConfig(steps=100, lr=1e-2, warmup=1, max_blocks=8, checkpoint_every=50, cosine_steps=1000,
                         time_limit=5.0)
    info = {"name": "tiny"}

    def fresh():
        return MtpAdapter(load_model(tiny_model_dir("llama")).decoder, MtpConfig(k=2, rank=4))

    samples = _samples(fresh().decoder.cfg.vocab_size, 2)
    trainer = train(fresh(), samples, config, tmp_path / "a.pt", info, info)
    saved = load_checkpoint(tmp_path / "a.pt")
    assert trainer.step == saved["step"] == 5 and saved["trained_seconds"] == 5.0  # saved at the limit, not at 50
    # the last step (4 s in) ran at 4/5 of the cosine over the time, not at 4/1000 of cosine_steps'
    assert saved["optimizer"]["param_groups"][0]["lr"] == pytest.approx(learning_rate(4, 1e-2, 1, 0, 0.8))
    # resumed with a longer limit, the clock goes on from the checkpoint's seconds
    longer = TrainConfig(**{**config.__dict__, "time_limit": 8.0})
    resumed = train(fresh(), samples, longer, tmp_path / "a.pt", info, info, resume=saved)
    assert resumed.step == 8 and load_checkpoint(tmp_path / "a.pt")["trained_seconds"] == 8.0
    with pytest.raises(ValueError, match="time_limit"):
        TrainConfig(time_limit=-1)


def test_bfloat16_forward_passes_train_float32_weights_to_the_same_loss(tiny_model_dir, tmp_path):
    """--precision bfloat16 runs the forward passes under autocast: the first loss is float32's to bfloat16's
    rounding, training still lowers it, and the adapter's weights (what is saved and shipped) stay float32."""
    from mtpedge.models.loading import load_model

    torch.set_num_threads(1)
    samples = _samples(load_model(tiny_model_dir("llama")).config.vocab_size, 2)
    runs = {}
    for precision in ("float32", "bfloat16"):
        torch.manual_seed(0)
        adapter = MtpAdapter(load_model(tiny_model_dir("llama")).decoder, MtpConfig(k=2, rank=4))
        config = TrainConfig(steps=30, lr=1e-2, warmup=1, max_blocks=8, checkpoint_every=30, precision=precision)
        runs[precision] = train(adapter, samples, config, tmp_path / f"{precision}.pt", {}, {}).history
    first32, first16 = runs["float32"][0]["loss"], runs["bfloat16"][0]["loss"]
    assert first16 == pytest.approx(first32, rel=0.02) and first16 != first32  # autocast was on, and close
    losses = [m["loss"] for m in runs["bfloat16"]]
    assert np.mean(losses[-4:]) < 0.8 * np.mean(losses[:4])
    state = load_checkpoint(tmp_path / "bfloat16.pt")["state"]
    assert {value.dtype for value in state.values()} == {torch.float32}


def test_an_unknown_precision_is_refused():
    with pytest.raises(ValueError, match="precision must be one of float32, bfloat16"):
        TrainConfig(precision="float16")

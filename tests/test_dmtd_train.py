"""DMTD training on a tiny model: the gate, that training lowers the gated loss, and exact resume."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mtpedge.models.dmtd import DmtdHead, cyclic_gate, dmtd_logits, perplexities, thinking_hidden
from mtpedge.models.dmtd_train import TrainSettings, load_head, train_dmtd


def test_cyclic_gate_opens_the_prompt_and_every_tau_th_position_after_it():
    gate = cyclic_gate(10, 3, anchor=2)
    assert gate.tolist() == [True, True, True, False, False, True, False, False, True, False]
    assert cyclic_gate(5, 2, anchor=0).tolist() == [True, False, True, False, True]
    with pytest.raises(ValueError, match="τ"):
        cyclic_gate(5, 0, anchor=0)


@pytest.fixture(scope="module")
def tiny_loaded(tiny_model_dir):
    from mtpedge.models.loading import load_model

    torch.manual_seed(0)
    return load_model(tiny_model_dir("llama"))


@pytest.fixture(scope="module")
def tiny_data(tiny_bundle, tmp_path_factory):
    from mtpedge.models.distill_data import make_distill_data, save_distill_data
    from mtpedge.runtime.engine import Engine

    engine = Engine.load(tiny_bundle("llama"), threads=1)
    samples = make_distill_data(engine, ["hello there", "count to ten", "a poem about rain"], max_new_tokens=24)
    path = tmp_path_factory.mktemp("distill") / "tiny.npz"
    save_distill_data(samples, path)
    return path


def test_a_fully_open_gate_with_no_extra_embedding_would_be_the_base(tiny_loaded):
    """The gated pass differs from the base only by the gate and the added embedding (sanity of the split)."""
    decoder = tiny_loaded.decoder
    head = DmtdHead(decoder, 1)
    ids = np.arange(3, 15, dtype=np.int64)
    h_think = thinking_hidden(decoder, ids, head.split)
    with torch.no_grad():
        full = decoder(*_contract_inputs(decoder, ids))[0][0]
        emb = decoder.model.embed_tokens(torch.from_numpy(ids))[None]
        # emb + 1 * (h_think - emb) = h_think: the open gate then reproduces the base model exactly
        gated = dmtd_logits(decoder, head, ids, h_think - emb, np.ones(len(ids), dtype=bool))
    assert torch.allclose(gated, full, atol=1e-4)


def _contract_inputs(decoder, ids):
    from mtpedge.models.dmtd import Causal

    causal = Causal(decoder, len(ids))
    emb = decoder.model.embed_tokens(torch.from_numpy(ids))[None]
    past = [causal.past] * (2 * decoder.cfg.num_layers)
    return (emb, causal.bias, causal.cos, causal.sin, *past)


def test_training_lowers_the_gated_loss_and_resume_is_exact(tiny_loaded, tiny_data, tmp_path):
    settings = TrainSettings(decoding_layers=1, taus=(2, 3), steps=6, lr=3e-3, warmup=1, checkpoint_every=3,
                             eval_every=0)
    straight = train_dmtd(tiny_loaded, tiny_data, tmp_path / "a", settings)
    train_dmtd(tiny_loaded, tiny_data, tmp_path / "b", settings, stop_at=3)
    resumed = train_dmtd(tiny_loaded, tiny_data, tmp_path / "b", settings, resume=True)
    head_a, state_a = load_head(straight, tiny_loaded)
    head_b, state_b = load_head(resumed, tiny_loaded)
    assert state_a["step"] == state_b["step"] == 6
    for (name, a), (_, b) in zip(head_a.state_dict().items(), head_b.state_dict().items(), strict=True):
        assert torch.equal(a, b), name
    with pytest.raises(ValueError, match="--resume"):
        train_dmtd(tiny_loaded, tiny_data, tmp_path / "a", settings)

    longer = TrainSettings(decoding_layers=1, taus=(2,), steps=40, lr=3e-3, warmup=1, eval_every=0,
                           checkpoint_every=40)
    trained, _ = load_head(train_dmtd(tiny_loaded, tiny_data, tmp_path / "c", longer), tiny_loaded)
    from mtpedge.models.distill_data import load_distill_data

    sample = load_distill_data(tiny_data)[0]
    ids = np.concatenate([sample.prompt_ids, sample.response_ids])
    anchor = len(sample.prompt_ids) - 1
    before = perplexities(tiny_loaded.decoder, DmtdHead(tiny_loaded.decoder, 1), ids, (2,), anchor)["tau2"]
    after = perplexities(tiny_loaded.decoder, trained, ids, (2,), anchor)["tau2"]
    assert after < before


def test_the_stream_reads_a_folder_of_shards_and_sees_it_grow(tiny_loaded, tiny_data, tmp_path):
    """`mtpedge distill` writes a folder of shards; the DMTD trainer takes it as --data while it grows."""
    import os

    from mtpedge.models.distill_data import load_distill_data, save_distill_data
    from mtpedge.models.dmtd_train import DistillStream

    samples = load_distill_data(tiny_data)
    save_distill_data(samples[:2], tmp_path / "first-0000.npz")
    stream = DistillStream(tmp_path, tiny_loaded.decoder, DmtdHead(tiny_loaded.decoder, 1), max_len=64)
    assert len(stream.sequences) == 2
    save_distill_data(samples[2:], tmp_path / "first-0001.npz")
    os.utime(tmp_path, (0, stream.mtime + 1))  # a new shard renamed into the folder changes its mtime
    assert stream.refresh() and len(stream.sequences) == 3

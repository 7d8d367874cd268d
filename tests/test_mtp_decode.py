"""The multi-token adapter exported and decoded: gate-0 identity with the base graphs, the adapter path's
parity with PyTorch, the host sampler head, and lossless greedy decoding with the `mtp` drafter."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
import torch

from mtpedge.export.bundle_writer import ExportConfig, export_bundle
from mtpedge.export.quant_config import QuantConfig
from mtpedge.models.loading import load_model
from mtpedge.models.mtp_adapter import MtpAdapter, MtpConfig
from mtpedge.models.mtp_training import MtpTrainer, TrainConfig, save_checkpoint
from mtpedge.runtime.drafters import make_drafter
from mtpedge.runtime.drafters.mtp_head import SamplerHead, learned_masks
from mtpedge.runtime.engine import Engine
from mtpedge.runtime.generate import generate
from tests.conftest import TINY_CONTEXT, TINY_DECODE_WIDTHS, TINY_PREFILL

PROMPTS = [[1, 5, 9, 2], [7, 7, 7, 7, 7, 7], [3, 14, 15, 92, 65, 35, 89], [42], [11, 12, 13, 14, 15, 16, 17, 18]]


def _random_adapter(model_dir, config: MtpConfig, seed: int = 0) -> MtpAdapter:
    """An adapter with every part away from its initial value, so that a leak or a mismatch would show."""
    torch.manual_seed(seed)
    adapter = MtpAdapter(load_model(model_dir).decoder, config)
    with torch.no_grad():
        adapter.masks.normal_()
        for module in adapter.lora.values():
            module.lora_B.normal_(std=0.05)
        if adapter.sampler is not None:
            adapter.sampler.fc2.weight.normal_(std=0.05)
            for name, param in adapter.sampler.named_parameters():
                if "norm" in name:  # a port that drops a norm's weight shows
                    param.uniform_(0.5, 1.5)
    return adapter


@pytest.fixture(scope="module")
def mtp_bundle(tiny_model_dir, tmp_path_factory):
    """mtp_bundle(rank, sampler) -> (bundle folder, adapter) for the tiny llama."""
    made = {}

    def make(rank: int = 4, sampler: bool = True, form: str = "residual"):
        if (rank, sampler, form) not in made:
            folder = tmp_path_factory.mktemp(f"mtp_r{rank}_s{int(sampler)}_{form}")
            adapter = _random_adapter(tiny_model_dir("llama"), MtpConfig(k=3, rank=rank, sampler=sampler,
                                                                         sampler_form=form))
            save_checkpoint(folder / "adapter.pt", MtpTrainer(adapter, TrainConfig()), {"name": "tiny"}, {})
            config = ExportConfig(context=TINY_CONTEXT, prefill_width=TINY_PREFILL, decode_widths=TINY_DECODE_WIDTHS,
                                  mtp_adapter=str(folder / "adapter.pt"))
            made[(rank, sampler, form)] = (export_bundle(tiny_model_dir("llama"), folder / "bundle", config), adapter)
        return made[(rank, sampler, form)]

    return make


def test_adapter_graph_with_gate_zero_equals_the_base_graph(mtp_bundle, tiny_bundle):
    folder, _ = mtp_bundle()
    base, adapted = Engine.load(tiny_bundle("llama"), threads=1), Engine.load(folder, threads=1)
    assert "lora_gate" in adapted.graphs.entries[0].inputs and "lora_gate" not in base.graphs.entries[0].inputs
    for prompt in PROMPTS:
        base.reset(), adapted.reset()
        np.testing.assert_allclose(adapted.prefill(prompt), base.prefill(prompt), atol=1e-6, rtol=0)
        for engine in (base, adapted):  # one tree call of width 8 after the prompt
            engine.last = engine.run_block(engine.embed(np.arange(5, 13)), np.arange(-1, 7))
        np.testing.assert_allclose(adapted.last.logits, base.last.logits, atol=1e-6, rtol=0)
        for layer in range(base.config.num_layers):
            np.testing.assert_allclose(adapted.last.new_keys[layer], base.last.new_keys[layer], atol=1e-6, rtol=0)


def test_adapter_graph_with_gate_one_matches_pytorch(mtp_bundle):
    folder, adapter = mtp_bundle()
    engine = Engine.load(folder, threads=1)
    # which checkpoint the bundle was made from (a cached -mtp bundle of another adapter is exported again)
    assert engine.manifest.extras["mtp"]["checkpoint_sha256"] == hashlib.sha256(
        (folder.parent / "adapter.pt").read_bytes()).hexdigest()
    prompt = np.array([3, 1, 4, 1, 5, 9, 2, 6])
    engine.prefill(prompt)
    masks = learned_masks(engine)
    np.testing.assert_array_equal(masks, adapter.masks.detach().numpy())
    chain = np.arange(-1, 3)
    gate = np.array([0, 1, 1, 1], dtype=np.float32)
    embeds = np.concatenate([engine.embed([7]), masks])
    out = engine.run_block(embeds, chain, gate)
    # reference: the whole sequence [prompt, 7, masks] causally in PyTorch, gate 1 on the masks
    tokens = torch.from_numpy(np.concatenate([prompt, [7]]))
    full = torch.cat([adapter.decoder.model.embed_tokens(tokens), adapter.masks]).detach()[None]
    from mtpedge.models.mtp_layout import causal_bias
    from mtpedge.runtime.rope import inverse_frequencies, rope_tables

    n = full.shape[1]
    cos, sin = rope_tables(np.arange(n), inverse_frequencies(adapter.decoder.cfg.rope, adapter.decoder.cfg.head_dim))
    cfg = adapter.decoder.cfg
    past = [torch.zeros(1, cfg.num_kv_heads, 0, cfg.head_dim)] * (2 * cfg.num_layers)
    full_gate = torch.zeros(1, n)
    full_gate[0, -3:] = 1
    with torch.no_grad():
        hidden, _ = adapter.run(full, torch.from_numpy(causal_bias(n)), torch.from_numpy(cos), torch.from_numpy(sin),
                                past, full_gate)
        logits = adapter.unembed(hidden)
    np.testing.assert_allclose(out.hidden, hidden[0, -4:].numpy(), atol=2e-5, rtol=1e-4)
    np.testing.assert_allclose(out.logits, logits[0, -4:].numpy(), atol=2e-5, rtol=1e-4)
    no_gate = engine.run_block(embeds, chain)
    assert np.abs(no_gate.logits[1:] - out.logits[1:]).max() > 1e-3  # the LoRA is really in the graph
    np.testing.assert_allclose(no_gate.logits[0], out.logits[0], atol=1e-6, rtol=0)


@pytest.mark.parametrize("form", ["residual", "paper"])
def test_host_sampler_head_matches_pytorch(mtp_bundle, form):
    folder, adapter = mtp_bundle(form=form)
    engine = Engine.load(folder, threads=1)
    full = SamplerHead(engine, candidates=0)
    assert full.form == form
    rng = np.random.default_rng(0)
    hidden = rng.standard_normal((3, engine.config.hidden_size)).astype(np.float32)
    prev = 17
    with torch.no_grad():
        ref = adapter.sampler_hidden(torch.tensor([prev]), torch.from_numpy(hidden[:1]))[0].numpy()
        ref_logits = adapter.unembed(torch.from_numpy(ref)).numpy()
    np.testing.assert_allclose(full.hidden(prev, hidden[0]), ref, atol=1e-5, rtol=1e-5)
    assert full.best_token(ref, None) == int(np.argmax(ref_logits))
    # the shortlist picks the best of the candidates it is given
    shortlist = SamplerHead(engine, candidates=8)
    plain = rng.standard_normal(engine.config.vocab_size).astype(np.float32)
    pick = shortlist.best_token(ref, plain)
    top8 = np.argsort(-plain)[:8]
    assert pick in top8 and pick == int(top8[np.argmax(ref_logits[top8])])


@pytest.mark.parametrize("rank,sampler", [(4, True), (4, False), (0, False)])
@pytest.mark.parametrize("layout,options", [("linear", {}), ("quadratic", {}), ("tree", {}),
                                            ("tree", {"width": 32, "branch": 2, "mask_gain": 0.0}),
                                            ("tree", {"width": 8, "branch": 8, "mask_gain": 5.0}),
                                            ("tree", {"lookup": True})])
def test_mtp_greedy_output_equals_plain_decoding(mtp_bundle, tiny_bundle, rank, sampler, layout, options):
    folder, _ = mtp_bundle(rank, sampler)
    engine, base = Engine.load(folder, threads=1), Engine.load(tiny_bundle("llama"), threads=1)
    calls = lookup_tries = 0
    for prompt in PROMPTS:
        plain = generate(base, prompt, max_new_tokens=40, stop_token_ids=set())
        drafter = make_drafter("mtp", engine, mtp_layout=layout, **options)
        result = generate(engine, prompt, max_new_tokens=40, stop_token_ids=set(), drafter=drafter)
        assert result.token_ids == plain.token_ids
        calls += result.stats.decode_calls
        assert drafter.settings["sampler"] == sampler
        lookup_tries += drafter.lookup.rates.tries.sum() if options.get("lookup") else 1
    assert calls > 0 and lookup_tries > 0  # with lookup: its chains were really in the trees


def test_mtp_with_the_papers_sampler_head_is_lossless(mtp_bundle, tiny_bundle):
    folder, _ = mtp_bundle(form="paper")
    engine, base = Engine.load(folder, threads=1), Engine.load(tiny_bundle("llama"), threads=1)
    for prompt in PROMPTS:
        plain = generate(base, prompt, max_new_tokens=40, stop_token_ids=set())
        drafter = make_drafter("mtp", engine, candidates=0)
        result = generate(engine, prompt, max_new_tokens=40, stop_token_ids=set(), drafter=drafter)
        assert result.token_ids == plain.token_ids


def test_esp_with_learned_masks_is_lossless(mtp_bundle, tiny_bundle):
    for rank in (0, 4):
        folder, adapter = mtp_bundle(rank, rank > 0)
        engine, base = Engine.load(folder, threads=1), Engine.load(tiny_bundle("llama"), threads=1)
        drafter = make_drafter("esp", engine, masks=2, mask_init="learned", mask_update=0.0)
        assert drafter.lora_on_slots == (rank > 0)
        np.testing.assert_array_equal(drafter.probe.masks.learned, adapter.masks.detach().numpy())
        for prompt in PROMPTS[:3]:
            plain = generate(base, prompt, max_new_tokens=30, stop_token_ids=set())
            assert generate(engine, prompt, max_new_tokens=30, stop_token_ids=set(), drafter=drafter).token_ids == \
                plain.token_ids


@pytest.mark.parametrize("name", ["esp", "hybrid"])
def test_mask_drafters_default_to_learned_masks_when_the_bundle_has_them(mtp_bundle, tiny_bundle, name):
    folder, _ = mtp_bundle(0, False)
    learned = make_drafter(name, Engine.load(folder, threads=1))
    assert (learned.settings["mask_init"], learned.settings["mask_update"]) == ("learned", 0.0)
    plain = make_drafter(name, Engine.load(tiny_bundle("llama"), threads=1))
    assert (plain.settings["mask_init"], plain.settings["mask_update"]) == ("mean", 0.1)


def test_mtp_drafter_refuses_bundles_without_an_adapter(tiny_bundle):
    from mtpedge.runtime.bundle import BundleError

    engine = Engine.load(tiny_bundle("llama"), threads=1)
    with pytest.raises(BundleError, match="train-mtp"):
        make_drafter("mtp", engine)
    with pytest.raises(BundleError, match="mtp-adapter"):
        make_drafter("esp", engine, mask_init="learned")
    with pytest.raises(BundleError, match="mtp-adapter"):
        engine.run_block(engine.embed([1, 2]), np.array([-1, 0]), np.array([0, 1], dtype=np.float32))


def test_a_sampler_head_of_an_unknown_form_or_missing_weights_is_refused(mtp_bundle, tmp_path):
    import shutil

    from mtpedge.runtime.bundle import BundleError

    folder = shutil.copytree(mtp_bundle(form="paper")[0], tmp_path / "bundle")
    engine = Engine.load(folder, threads=1)
    engine.manifest.extras["mtp"]["sampler_form"] = "deep"
    with pytest.raises(BundleError, match="'deep'.*update mtpedge"):
        SamplerHead(engine)
    engine.manifest.extras["mtp"]["sampler_form"] = "paper"
    with np.load(folder / "mtp_sampler.npz") as z:
        np.savez(folder / "mtp_sampler.npz", **{k: z[k] for k in z.files if k != "norm2_weight"})
    with pytest.raises(BundleError, match="lacks norm2_weight.*re-run"):
        SamplerHead(engine)


def test_mtp_drafter_checks_its_settings(mtp_bundle):
    engine = Engine.load(mtp_bundle()[0], threads=1)
    with pytest.raises(ValueError, match="k = 3"):
        make_drafter("mtp", engine, masks=4)
    with pytest.raises(ValueError, match="linear, quadratic or tree"):
        make_drafter("mtp", engine, mtp_layout="cubic")
    with pytest.raises(ValueError, match="use >= 5"):
        make_drafter("mtp", engine, width=4)
    with pytest.raises(ValueError, match="branch >= 1"):
        make_drafter("mtp", engine, mtp_layout="tree", branch=0)
    with pytest.raises(ValueError, match="tree layout"):
        make_drafter("mtp", engine, mtp_layout="quadratic", lookup=True)


# int8 weights on int8-activation kernels over fused ops, as the fast recipe (the tiny model has no GGUF grid)
QUANTIZED = QuantConfig(weights="int8", block_size=16, accuracy_level=4, fine_activation_roles=("down_proj",),
                        fused_ops=True, quality_report=False)


@pytest.mark.parametrize("kernels", ["onnxruntime", "mtpedge"])
def test_a_quantized_adapter_bundle_keeps_the_lora_float_and_decodes_losslessly(tiny_model_dir, tmp_path, kernels):
    import dataclasses

    import onnx

    from mtpedge.runtime.kernels import KernelsUnavailable, library

    if kernels == "mtpedge":
        try:
            library()
        except KernelsUnavailable as err:
            pytest.skip(str(err))
    quantized = dataclasses.replace(QUANTIZED, kernels=kernels)
    model = tiny_model_dir("llama")
    save_checkpoint(tmp_path / "adapter.pt", MtpTrainer(_random_adapter(model, MtpConfig(k=3, rank=4, sampler=True)),
                                                        TrainConfig()), {"name": "tiny"}, {})
    shapes = {"context": TINY_CONTEXT, "prefill_width": TINY_PREFILL, "decode_widths": TINY_DECODE_WIDTHS,
              "quantization": quantized}
    folder = export_bundle(model, tmp_path / "mtp", ExportConfig(mtp_adapter=str(tmp_path / "adapter.pt"), **shapes))
    base = Engine.load(export_bundle(model, tmp_path / "base", ExportConfig(learned_masks="none", **shapes)), threads=1)
    engine = Engine.load(folder, threads=1)
    assert {g.precision for g in engine.manifest.graphs} == {quantized.label}
    graph = onnx.load(str(folder / engine.manifest.graphs[1].file), load_external_data=False)
    ops = [node.op_type for node in graph.graph.node]
    # every base projection is a MatMulNBits (or BlockMatMul); the two LoRA factors of the 7 projections of each layer
    # stay MatMul, and so do the attention's two products on onnxruntime's operators (CacheAttention on mtpedge's)
    layers = engine.config.num_layers
    if kernels == "mtpedge":
        assert "BlockMatMul" in ops and ops.count("CacheAttention") == layers and ops.count("MatMul") == layers * 7 * 2
    else:
        assert "MatMulNBits" in ops and ops.count("MatMul") == layers * (7 * 2 + 2)
    for prompt in PROMPTS:  # gate 0: the base model's quantized graphs, bit for bit
        base.reset(), engine.reset()
        np.testing.assert_array_equal(engine.prefill(prompt), base.prefill(prompt))
    for prompt in PROMPTS:
        plain = generate(engine, prompt, max_new_tokens=40, stop_token_ids=set())
        drafter = make_drafter("mtp", engine)
        assert drafter.settings["sampler"]  # the host sampler head came along
        result = generate(engine, prompt, max_new_tokens=40, stop_token_ids=set(), drafter=drafter)
        assert result.token_ids == plain.token_ids and result.stats.decode_calls < 40


def test_expansion_pool_keeps_the_best_children_of_each_depth():
    from mtpedge.runtime.tree_build import expansion_pool

    def expand(depth, parents):  # child tokens encode (depth, parent token, rank); probabilities 0.5, 0.3, 0.2
        tokens = np.array([[100 * (depth + 1) + 10 * (p % 10) + r for r in range(3)] for p in parents])
        return tokens, np.tile([0.5, 0.3, 0.2], (parents.size, 1))

    tokens, parents, scores = expansion_pool(7, expand, depths=2, keep=4)
    assert tokens[0] == 7 and parents[0] == -1 and scores[0] == 1
    # depth 1: only three children exist; depth 2: the 4 best of 9 grandchildren, ties to the earlier parent
    np.testing.assert_array_equal(tokens[1:4], [170, 171, 172])
    np.testing.assert_array_equal(parents[1:], [0, 0, 0, 1, 1, 2, 1])
    np.testing.assert_allclose(scores[1:], [0.5, 0.3, 0.2, 0.25, 0.15, 0.15, 0.1])
    np.testing.assert_array_equal(tokens[4:], [200, 201, 210, 202])


def test_sampler_candidates_agree_with_the_single_best_token(mtp_bundle):
    engine = Engine.load(mtp_bundle()[0], threads=1)
    head = SamplerHead(engine, candidates=16)
    rng = np.random.default_rng(1)
    hidden = rng.standard_normal(engine.config.hidden_size).astype(np.float32)
    plain = rng.standard_normal(engine.config.vocab_size).astype(np.float32)
    prev = np.array([3, 17, 17])
    tokens, probs = head.top_next_tokens(prev, hidden, plain, count=5)
    assert tokens.shape == probs.shape == (3, 5)
    assert np.all(np.diff(probs, axis=1) <= 0) and np.all(probs.sum(axis=1) <= 1 + 1e-9)
    np.testing.assert_array_equal(tokens[1], tokens[2])
    for row, token in enumerate(prev):
        assert tokens[row, 0] == head.best_token(head.hidden(int(token), hidden), plain)


def test_adapter_bundles_refuse_the_qdq_converter(mtp_bundle, tmp_path):
    from mtpedge.export.qdq import QdqConfig
    from mtpedge.export.qdq_bundle import qdq_bundle

    folder, _ = mtp_bundle()
    with pytest.raises(ValueError, match="lora_gate"):
        qdq_bundle(folder, tmp_path / "q", QdqConfig())
    with pytest.raises(ValueError, match="float32 or MatMulNBits"):
        ExportConfig(mtp_adapter="adapter.pt", quantization=QdqConfig())
    assert not (tmp_path / "q").exists()


def test_a_path_ending_without_masks_drafts_from_its_deepest_ancestor_with_masks(mtp_bundle):
    drafter = make_drafter("mtp", Engine.load(mtp_bundle()[0], threads=1), mtp_layout="tree")  # k = 3
    drafter._owners = np.array([0, 2])
    assert drafter.deepest_owner([0, 2]) == (2, 0)  # ends on an owner: all 3 masks forecast
    assert drafter.deepest_owner([0, 2, 5]) == (2, 1)  # one step below it: masks 2 and 3 are left
    assert drafter.deepest_owner([0, 1, 3]) == (0, 2)
    assert drafter.deepest_owner([0, 1, 3, 4]) == (None, 0)  # 3 steps below the root: its masks are used up


def test_cli_generate_passes_the_mtp_tree_settings(mtp_bundle, capsys):
    import json

    from mtpedge.main import main

    folder = str(mtp_bundle()[0])
    argv = ["generate", "hello hello hello", "--bundle", folder, "--raw", "--json", "--max-new-tokens", "16"]
    assert main([*argv, "--drafter", "none"]) == 0
    plain = json.loads(capsys.readouterr().out)
    assert main([*argv, "--drafter", "mtp:branch=2:mask_gain=0.5:lookup=true:width=8"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["token_ids"] == plain["token_ids"]
    settings = out["drafter_settings"]
    assert (settings["mtp_layout"], settings["branch"], settings["mask_gain"], settings["lookup"], settings["width"]) \
        == ("tree", 2, 0.5, True, 8)

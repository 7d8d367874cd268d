"""DMTD drafters on the shared decode loop, on a tiny model (and, slow, the shipped DMTD model of SmolLM2)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mtpedge.runtime.drafters import make_drafter
from mtpedge.runtime.engine import Engine
from mtpedge.runtime.generate import generate

PROMPTS = [[1, 5, 9, 33, 2], [7, 7, 7, 120, 45, 3, 99, 18, 200, 11, 4, 61, 62, 63, 64, 65, 66, 67, 12],
           list(range(40, 75))]


@pytest.fixture(scope="module")
def tiny_dmtd(tiny_model_dir, tmp_path_factory):
    """A DMTD bundle of the tiny llama (m = 1 thinking + D = 1 decoding layer of 3), trained a few steps on the
    model's output; its draft graphs score a shortlist of 100 tokens."""
    from mtpedge.export.dmtd_bundle import DmtdExportConfig, export_dmtd_bundle
    from mtpedge.models.distill_data import DistillSample, save_distill_data
    from mtpedge.models.dmtd import DmtdConfig
    from mtpedge.models.dmtd_train import TrainSettings, train_dmtd
    from mtpedge.models.loading import load_model

    torch.manual_seed(0)
    loaded = load_model(tiny_model_dir("llama"))
    rng = np.random.default_rng(0)
    samples = [DistillSample(rng.integers(3, 300, 6), rng.integers(3, 300, 20)) for _ in range(4)]
    folder = tmp_path_factory.mktemp("dmtd")
    save_distill_data(samples, folder / "data.npz")
    config = DmtdConfig(decoding_layers=1, thinking_layers=1, lora_rank=4, lora_alpha=4.0)
    ckpt = train_dmtd(loaded, folder / "data.npz", folder / "ckpt",
                      TrainSettings(model=config, steps=8, lr=3e-3, warmup=1, eval_every=0))
    export = DmtdExportConfig(context=256, prefill_width=16, decode_widths=(1, 8), copy_widths=(1, 4, 8),
                              shortlist=100)
    bundle = export_dmtd_bundle(loaded, ckpt, folder / "bundle", export)
    return loaded, ckpt, bundle


def test_the_graphs_tap_the_thinking_layers_output(tiny_dmtd):
    """Every call's extra output is the residual stream entering the first trained layer, chunk after chunk."""
    from mtpedge.models.dmtd import tapped_states

    loaded, _, bundle = tiny_dmtd
    engine = Engine.load(bundle, threads=1)
    tokens = np.asarray(PROMPTS[2], dtype=np.int64)
    engine.reset()
    rows = np.concatenate([out.layer_hidden for out in engine.prefill_chunks(tokens)])
    expected = tapped_states(loaded.decoder, tokens, engine.manifest.extras["dmtd"]["tap_layer"])[0].numpy()
    np.testing.assert_allclose(rows, expected, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("draft_len", [0, 1, 3, 7])
def test_dmtd_spec_greedy_equals_plain_decoding(tiny_dmtd, draft_len):
    _, _, bundle = tiny_dmtd
    engine = Engine.load(bundle, threads=1)
    drafter = make_drafter(f"dmtd-spec:draft_len={draft_len}", engine)
    for prompt in PROMPTS:
        plain = generate(engine, prompt, max_new_tokens=40, stop_token_ids=set()).token_ids
        spec = generate(engine, prompt, max_new_tokens=40, stop_token_ids=set(), drafter=drafter)
        assert spec.token_ids == plain
        assert spec.stats.drafter_settings["lossy"] is False and spec.stats.lossless
        if draft_len == 0:
            assert spec.stats.tokens_per_call == 1.0


def test_dmtd_spec_verifies_lookup_chains_and_copy_drafts_and_equals_plain_decoding(tiny_dmtd):
    """With lookup on (the default), a repetitive prompt gets steps of both kinds, and the output is still plain
    decoding's: the tokens a lookup chain verified reach the copy as heads at its next call."""
    _, _, bundle = tiny_dmtd
    engine = Engine.load(bundle, threads=1)
    drafter = make_drafter("dmtd-spec", engine)
    prompt = [5, 6, 7, 8, 9] * 6 + [30, 31, 32, 5, 6, 7]
    plain = generate(engine, prompt, max_new_tokens=60, stop_token_ids=set()).token_ids
    spec = generate(engine, prompt, max_new_tokens=60, stop_token_ids=set(), drafter=drafter)
    assert spec.token_ids == plain and spec.stats.lossless
    steps = spec.stats.to_dict()["drafter_steps"]  # the step mix is in the run's stats
    assert steps["lookup"] > 0 and steps["copy"] > 0 and sum(steps.values()) <= spec.stats.decode_calls
    assert drafter.settings["static"] == "none"  # auto: no static n-gram table ships for the tiny tokenizer
    off = make_drafter("dmtd-spec:lookup=false", engine)
    assert off.choice is None and off.settings["lookup"] is False and off.settings["static"] == "none"
    alone = generate(engine, prompt, max_new_tokens=60, stop_token_ids=set(), drafter=off)
    assert alone.token_ids == plain and alone.stats.drafter_steps is None


def test_dmtd_spec_takes_the_lookup_chain_only_where_it_promises_more_tokens_per_second(tiny_dmtd):
    from mtpedge.runtime.cost_table import CostTable

    _, _, bundle = tiny_dmtd
    engine = Engine.load(bundle, threads=1)
    engine.cost_table = CostTable.flat(engine.manifest).with_seconds({1: 1.0, 8: 1.0})
    choice = make_drafter("dmtd-spec", engine).choice
    context = [5, 6, 7, 8, 9, 10, 11, 5, 6, 7]  # ends with the root, 7; "5 6 7" was followed by "8 9 10 ..."
    assert choice.lookup_chain(context, 7, room=7) is None  # the copy's cost is not measured yet
    # the step's tokens followed the untaken chain ("8 9", then the next root 5): its rates learn two hits, a miss
    rates = choice.source.rates
    choice.lookup_chain([*context, 8, 9, 5], 5, room=7)
    assert rates.hits[1:4].tolist() == [1, 1, 0] and rates.tries[1:4].tolist() == [1, 1, 1]
    copy_steps(choice, tokens=1.3, copy_seconds=1.0)  # a copy step costs two calls, for 1.3 tokens
    assert choice.lookup_chain(context, 7, room=7).tolist()[:3] == [7, 8, 9]
    assert choice.lookup_chain([1, 2, 3, 4, 9], 9, room=7) is None  # no match: the copy drafts
    # a free copy step that gains 2 tokens beats a lone 1-gram match's chain (prior first-draft rate 0.23)
    choice = make_drafter("dmtd-spec", engine).choice
    copy_steps(choice, tokens=2.0, copy_seconds=0.0)
    assert choice.lookup_chain([5, 20, 21, 22, 23, 5], 5, room=7) is None
    copy_steps(choice, tokens=2.0, copy_seconds=2.0)  # a copy that costs two more calls does not
    assert choice.lookup_chain([5, 20, 21, 22, 23, 5], 5, room=7).tolist()[:2] == [5, 20]


def copy_steps(choice, tokens: float, copy_seconds: float, steps: int = 200) -> None:
    """As if `steps` copy steps had run, each a one-second call that gained `tokens`, the copy's calls taking
    `copy_seconds` more."""
    choice.steps["copy"] = steps
    choice.copy_tokens = round(tokens * steps)
    choice.call_seconds = choice.call_table_seconds = float(steps)
    choice.copy_seconds = copy_seconds * steps


def test_a_copy_step_verifies_the_lookup_chain_that_continues_the_copys_draft_where_it_pays(tiny_dmtd):
    from mtpedge.runtime.cost_table import CostTable

    _, _, bundle = tiny_dmtd
    engine = Engine.load(bundle, threads=1)
    context = [5, 6, 7, 8, 9, 10, 11, 5]  # the root is 5; the copy drafts 6: "5 6" was followed by "7 8 9 ..."
    engine.cost_table = CostTable.flat(engine.manifest).with_seconds({1: 1.0, 8: 1.0})  # width is free
    choice = make_drafter("dmtd-spec", engine).choice
    assert choice.copy_chain(context, 5, [6], 0.9, room=7).tolist() == [5, 6, 7, 8, 9, 10, 11, 5]
    assert choice.copy_chain(context, 5, [6], 0.9, room=3).tolist() == [5, 6, 7, 8]
    assert choice.copy_chain([1, 2, 3, 5], 5, [6], 0.9, room=7).tolist() == [5, 6]  # nothing continues "5 6"
    engine.cost_table = CostTable.flat(engine.manifest).with_seconds({1: 1.0, 2: 1.1, 8: 3.0})  # width is dear
    choice = make_drafter("dmtd-spec", engine).choice
    assert choice.copy_chain(context, 5, [6], 0.9, room=7).tolist() == [5, 6]  # the draft pays, the rest does not
    assert choice.copy_chain(context, 5, [6], 0.05, room=7).tolist() == [5]  # an unlikely draft is not verified


def test_a_copy_step_teaches_the_copys_rates_and_the_continuations_apart(tiny_dmtd):
    from types import SimpleNamespace

    from mtpedge.runtime.cost_table import CostTable
    from mtpedge.runtime.tree import DraftTree

    _, _, bundle = tiny_dmtd
    engine = Engine.load(bundle, threads=1)
    choice = make_drafter("dmtd-spec", engine).choice  # no cost table: flat, the continuation fills the room
    chain = choice.copy_chain([5, 6, 7, 8, 9, 10, 11, 5], 5, [6], 0.9, room=4)
    assert chain.tolist() == [5, 6, 7, 8, 9]
    # the copy's 6 and the continuation's 7 were accepted, its 8 was not (9 never got its turn)
    choice.observe(DraftTree(chain, np.arange(-1, 4)), SimpleNamespace(seconds=0.01), [0, 1, 2])
    assert choice.copy_rate.hits[1] == choice.copy_rate.tries[1] == 1
    assert choice.continuation.tries[1:4].tolist() == [1, 1, 0] and choice.continuation.hits[1:4].tolist() == [1, 0, 0]
    assert choice.steps["copy"] == 1 and choice.copy_tokens == 3
    # a copy step whose draft did not pay for a wider call still counts: its copy calls ran
    engine.cost_table = CostTable.flat(engine.manifest).with_seconds({1: 1.0, 8: 3.0})
    choice = make_drafter("dmtd-spec", engine).choice
    assert choice.copy_chain([1, 2, 3, 5], 5, [6], 0.05, room=4).tolist() == [5]
    choice.observe(DraftTree.single(5), SimpleNamespace(seconds=0.01), [0])
    assert choice.steps["copy"] == 1 and choice.copy_tokens == 1 and choice.copy_rate.tries.sum() == 0


@pytest.mark.parametrize("tau", [1, 2, 3, 4])
def test_dmtd_cyclic_refilling_is_the_trained_gated_pass(tiny_dmtd, tau):
    """Inference with refilling computes exactly what training's two streams describe: each generated token is
    the argmax of the teacher-forced gated pass over the whole sequence (phase anchored at the last prompt token)."""
    from mtpedge.models.dmtd import dmtd_logits, draft_windows, tapped_states
    from mtpedge.models.dmtd_train import load_dmtd

    loaded, ckpt, bundle = tiny_dmtd
    model, _ = load_dmtd(ckpt, loaded)
    engine = Engine.load(bundle, threads=1)
    drafter = make_drafter(f"dmtd:tau={tau}", engine)
    for prompt in PROMPTS:
        out = generate(engine, prompt, max_new_tokens=24, stop_token_ids=set(), drafter=drafter)
        assert len(out.token_ids) == 24 and out.stats.drafter_settings["lossy"] is True
        assert out.stats.lossless is False and out.stats.to_dict()["lossless"] is False
        ids = np.asarray(prompt + out.token_ids, dtype=np.int64)
        with torch.no_grad():
            logits = dmtd_logits(loaded.decoder, model, ids, tapped_states(loaded.decoder, ids, model.tap),
                                 draft_windows(len(ids), tau, len(prompt) - 1))
        expected = logits[len(prompt) - 1: -1].argmax(-1).tolist()
        assert out.token_ids == expected


def test_dmtd_refuses_what_the_bundle_cannot_run(tiny_dmtd, tiny_bundle):
    from mtpedge.runtime.bundle import BundleError
    from mtpedge.runtime.sampling import SamplingConfig

    _, _, bundle = tiny_dmtd
    engine = Engine.load(bundle, threads=1)
    with pytest.raises(ValueError, match="τ must be"):
        make_drafter("dmtd:tau=17", engine)
    with pytest.raises(ValueError, match="draft_len"):
        make_drafter("dmtd-spec:draft_len=16", engine)
    with pytest.raises(ValueError, match="greedily only"):
        generate(engine, [1, 2, 3], 4, SamplingConfig(temperature=0.7), drafter=make_drafter("dmtd", engine))
    with pytest.raises(BundleError, match="not a DMTD bundle"):
        make_drafter("dmtd-spec", Engine.load(tiny_bundle("llama"), threads=1))


def test_generate_command_runs_both_modes_and_warns_for_the_lossy_one(tiny_dmtd, capsys):
    import json

    from mtpedge.main import main

    _, _, bundle = tiny_dmtd
    outputs = {}
    for drafter in ("none", "dmtd-spec", "dmtd:tau=2"):
        assert main(["generate", "hello", "--bundle", str(bundle), "--drafter", drafter, "--max-new-tokens", "12",
                     "--json", "--threads", "1"]) == 0
        captured = capsys.readouterr()
        outputs[drafter] = json.loads(captured.out)
        assert ("LOSSY" in captured.err) == (drafter == "dmtd:tau=2")
    assert outputs["dmtd-spec"]["token_ids"] == outputs["none"]["token_ids"]
    assert outputs["dmtd:tau=2"]["drafter_settings"] == {"drafter": "dmtd", "tau": 2, "decoding_layers": 1,
                                                        "thinking_layers": 1, "lossy": True}
    assert outputs["dmtd:tau=2"]["lossless"] is False and outputs["dmtd-spec"]["lossless"] is True


def test_bench_methods_take_the_dmtd_names(tiny_dmtd):
    from mtpedge.bench.methods import DrafterMethod
    from mtpedge.bench.suite import resolve_methods
    from mtpedge.runtime.drafters import drafter_names

    assert resolve_methods(("dmtd-spec", "dmtd"), drafter_names()) == ["none", "dmtd-spec", "dmtd"]
    assert "dmtd" not in resolve_methods(("all",), drafter_names())  # lossy: only on request
    _, _, bundle = tiny_dmtd
    engine = Engine.load(bundle, threads=1)
    plain, spec = DrafterMethod(engine, "none"), DrafterMethod(engine, "dmtd-spec")
    for prompt in PROMPTS:
        run = spec.generate(prompt, 20)
        assert run.token_ids == plain.generate(prompt, 20).token_ids
        assert run.decode_calls >= 1 and run.extra["lossless"] is True


@pytest.mark.parametrize("kernels", ["onnxruntime", "mtpedge"])
def test_a_quantized_dmtd_bundle_runs_the_copy_on_4_bit_blocks_and_dmtd_spec_stays_lossless(tiny_dmtd, tmp_path,
                                                                                            kernels):
    """On a QuantConfig (the fast recipe's shape: int8 activations, fused ops; the tiny model has no GGUF grid) the
    base graphs are that recipe's, the copy's graphs take COPY_PRECISION blocks on the same kernels with no float
    weight product left, no float32 work folder stays behind, and dmtd-spec outputs what plain decoding of the same
    quantized bundle does."""
    import dataclasses

    import onnx

    from mtpedge.export.dmtd_bundle import DmtdExportConfig, export_dmtd_bundle
    from mtpedge.export.quant_config import COPY_PRECISION, QuantConfig, copy_quantization
    from mtpedge.runtime.kernels import KernelsUnavailable, library

    if kernels == "mtpedge":
        try:
            library()
        except KernelsUnavailable as err:
            pytest.skip(str(err))
    loaded, ckpt, _ = tiny_dmtd
    quant = QuantConfig(weights="int8", block_size=16, accuracy_level=4, fused_ops=True, kernels=kernels,
                        quality_report=False)
    export = DmtdExportConfig(context=256, context_buckets=(128,), prefill_width=16, decode_widths=(1, 2, 8),
                              copy_widths=(1, 2, 8), shortlist=96, quantization=quant)
    bundle = export_dmtd_bundle(loaded, ckpt, tmp_path / "bundle", export)
    assert sorted(p.name for p in (bundle / "dmtd").iterdir() if p.name.startswith(".")) == []
    engine = Engine.load(bundle, threads=1)
    assert {g.precision for g in engine.manifest.graphs} == {quant.label}
    copy_label = copy_quantization(quant).label
    assert copy_label == dataclasses.replace(quant, weights=COPY_PRECISION[0], output_layer=COPY_PRECISION[1],
                                             quality_report=False).label
    dmtd = engine.manifest.extras["dmtd"]
    for kind, layers in (("think", dmtd["thinking_layers"]), ("decode", dmtd["decoding_layers"]),
                         ("draft", dmtd["decoding_layers"])):
        entries = dmtd[f"{kind}_graphs"]
        assert [e["width"] for e in entries] == [1, 2, 8, 16] and {e["precision"] for e in entries} == {copy_label}
        ops = [n.op_type for n in onnx.load(str(bundle / entries[0]["file"]), load_external_data=False).graph.node]
        # every weight product is on blocks; onnxruntime's operators keep the attention's two products as MatMul
        if kernels == "mtpedge":
            assert "BlockMatMul" in ops and ops.count("CacheAttention") == layers and "MatMul" not in ops
        else:
            assert "MatMulNBits" in ops and ops.count("MatMul") == 2 * layers
    for draft_len in (1, 2):
        drafter = make_drafter(f"dmtd-spec:draft_len={draft_len}", engine)
        for prompt in PROMPTS:
            plain = generate(engine, prompt, max_new_tokens=40, stop_token_ids=set()).token_ids
            spec = generate(engine, prompt, max_new_tokens=40, stop_token_ids=set(), drafter=drafter)
            assert spec.token_ids == plain and spec.stats.lossless


def test_the_dmtd_drafters_get_the_fast_dmtd_bundle_of_the_default_model_or_a_float32_one(tmp_path, monkeypatch):
    """Precision auto exports the default model's DMTD bundle on the fast recipe into `-dmtd-<fast label>`;
    float32 into `-dmtd`; each once."""
    import mtpedge.bundles as bundles
    import mtpedge.export.dmtd_bundle as dmtd_bundle
    import mtpedge.models.loading as loading

    monkeypatch.setenv("MTPEDGE_CACHE", str(tmp_path))
    exported = []

    def fake_export(loaded, checkpoint, folder, config, progress):
        exported.append((folder, config))
        folder.mkdir(parents=True)
        (folder / "manifest.json").write_text("{}")

    monkeypatch.setattr(dmtd_bundle, "export_dmtd_bundle", fake_export)
    monkeypatch.setattr(loading, "load_model", lambda model: None)
    monkeypatch.setattr(bundles, "_why_reexport", lambda *args: None)  # tested with the other cache folders
    fast = bundles.ensure_bundle(None, None, 1024, say=lambda _: None, dmtd=True)
    assert fast == bundles.default_bundle_dir(None, 1024, f"dmtd-{bundles.fast_label()}")
    float32 = bundles.ensure_bundle(None, None, 1024, say=lambda _: None, dmtd=True, precision="float32")
    assert float32 == bundles.default_bundle_dir(None, 1024, "dmtd")
    assert bundles.ensure_bundle(None, None, 1024, say=lambda _: None, dmtd=True) == fast  # cached
    assert [folder for folder, _ in exported] == [fast, float32]
    fast_config, float32_config = (config for _, config in exported)
    assert fast_config.quantization is not None and fast_config.decode_widths == bundles.FAST_DECODE_WIDTHS
    assert fast_config.context_buckets == bundles.fast_buckets(1024) and fast_config.copy_widths == (1, 2, 4)
    assert float32_config.quantization is None and float32_config.context_buckets == ()


def test_a_cached_fast_dmtd_bundle_with_the_copy_at_another_precision_is_re_exported(tmp_path, monkeypatch):
    from types import SimpleNamespace

    import mtpedge.bundles as bundles
    from mtpedge.export.quant_config import copy_quantization, fast_recipe

    def cached(precision: str) -> None:
        extras = {"dmtd": {"draft_graphs": [{"precision": precision}]}}
        monkeypatch.setattr(bundles, "read_manifest", lambda folder: SimpleNamespace(extras=extras))

    monkeypatch.setattr(bundles, "_other_version", lambda folder: False)
    monkeypatch.setattr(bundles, "_predates_shipped_dmtd", lambda folder: False)
    monkeypatch.setattr(bundles, "_recipe_differs", lambda folder: False)
    monkeypatch.setattr(bundles, "_other_decode_widths", lambda folder: None)
    monkeypatch.setattr(bundles, "_predates_shipped_table", lambda folder: False)  # the fake manifests hold none
    cached(copy_quantization(fast_recipe()).label)
    assert bundles._why_reexport(tmp_path, None, mtp=False, dmtd=True, fast=True) is None
    cached("float32")
    assert "another precision" in bundles._why_reexport(tmp_path, None, mtp=False, dmtd=True, fast=True)
    assert bundles._why_reexport(tmp_path, None, mtp=False, dmtd=True, fast=False) is None  # the float32 bundle


@pytest.mark.slow
def test_default_dmtd_drafters_run_without_flags_and_dmtd_spec_equals_plain_decoding(capsys):
    """`--drafter dmtd-spec` with no bundle exports the default model with its shipped DMTD model (once, into the
    cache's fast DMTD bundle) and outputs exactly what plain decoding of that bundle does (the float32 DMTD
    bundle is the tiny model's case above). The lossy `dmtd` runs too and says it is lossy."""
    import json

    from mtpedge.bundles import default_bundle_dir, fast_label
    from mtpedge.main import main

    def run(*argv: str) -> dict:
        assert main(["generate", *argv, "--max-new-tokens", "40", "--json", "--threads", "1"]) == 0
        return json.loads(capsys.readouterr().out)

    fast = str(default_bundle_dir(None, 1024, f"dmtd-{fast_label()}"))
    for text in ["What is the capital of France?", "Write a haiku about the sea.", "Explain recursion briefly."]:
        spec = run(text, "--drafter", "dmtd-spec")
        assert spec["token_ids"] == run(text, "--bundle", fast, "--drafter", "none")["token_ids"]
        assert spec["lossless"] is True and spec["drafter_settings"]["drafter"] == "dmtd-spec"
    lossy = run("Write a haiku about the sea.", "--drafter", "dmtd:tau=2")
    assert lossy["lossless"] is False and len(lossy["token_ids"]) > 0

"""The row probe (runtime/row_probe.py): does a bundle, on this machine, compute a drafted chain's rows as plain
decoding does? A default drafter must be lossless, so where the probe says no, decoding is plain by default."""

import argparse
import json

import numpy as np
import pytest

from mtpedge.runtime.engine import Engine
from mtpedge.runtime.row_probe import probe_rows, row_probe_for


@pytest.fixture(scope="module")
def float_activation_bundle(tiny_bundle, tmp_path_factory):
    """A 4-bit bundle whose MatMuls take float activations (accuracy level 0): MLAS computes a one-row call with
    another kernel than a wider one on every x86 CPU measured (benchmarks/results/fast/README.md, section 8)."""
    from mtpedge.export.quant_config import QuantConfig
    from mtpedge.export.quantize_bundle import quantize_bundle

    config = QuantConfig("int4", block_size=16, accuracy_level=0, quality_report=False)
    return quantize_bundle(tiny_bundle("llama"), tmp_path_factory.mktemp("level0") / "b", config)


def test_a_float32_bundle_computes_a_chain_as_plain_decoding_does(tiny_bundle):
    probe = probe_rows(Engine.load(tiny_bundle("llama"), threads=1))
    assert probe.invariant and set(probe.max_diff) == {8, 32} and "as plain decoding's calls do" in probe.describe()


def test_fused_operators_over_int8_kernels_compute_a_chain_as_plain_decoding_does(tiny_model_dir, tmp_path):
    """The fast recipe's fused CPU operators (SkipSimplifiedLayerNormalization, RotaryEmbedding) over 8-bit
    weights in 16-input blocks, which MLAS computes alike at every row count on every x86 CPU measured: the rows
    agree, so the recipe does not keep a bundle from drafting by default (runtime/drafters.default_drafter)."""
    from mtpedge.export.bundle_writer import ExportConfig, export_bundle
    from mtpedge.export.quant_config import QuantConfig
    from mtpedge.runtime.bundle import read_manifest
    from mtpedge.runtime.drafters import DEFAULT_DRAFTER, default_drafter

    config = ExportConfig(context=64, prefill_width=8, decode_widths=(1, 4, 8),
                          quantization=QuantConfig("int8", block_size=16, fused_ops=True, quality_report=False))
    bundle = export_bundle(tiny_model_dir("llama"), tmp_path / "fused", config)
    assert read_manifest(bundle).extras["fused_ops"]["rotary"] > 0
    assert default_drafter(read_manifest(bundle)) == DEFAULT_DRAFTER
    probe = probe_rows(Engine.load(bundle, threads=1))
    assert probe.invariant, probe.describe()


def test_float_activations_make_a_wide_call_differ_and_the_probe_says_so(float_activation_bundle):
    engine = Engine.load(float_activation_bundle, threads=1)
    probe = probe_rows(engine)
    assert not probe.invariant and max(probe.max_diff.values()) > 0
    assert "not token-identical" in probe.describe()
    assert engine.cache.n_past == 0 and engine.graph_calls == 0  # the probe leaves the engine as it found it


def test_the_probe_is_cached_per_bundle_and_machine(tiny_bundle, tmp_path):
    engine = Engine.load(tiny_bundle("llama"), threads=1)
    first = row_probe_for(engine, tmp_path)
    (cached,) = tmp_path.glob("*.rows.json")
    data = json.loads(cached.read_text())
    data["max_diff"] = {"8": 0.5, "32": 0.0}  # a cached verdict is read back, not measured again
    cached.write_text(json.dumps(data))
    assert first.invariant and not row_probe_for(engine, tmp_path).invariant
    assert row_probe_for(engine, tmp_path, refresh=True).invariant
    cached.write_text("{not json")
    said = []
    assert row_probe_for(engine, tmp_path, say=said.append).invariant and "probing again" in said[0]


def test_an_unwritable_cache_folder_still_probes(tiny_bundle, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    said = []
    assert row_probe_for(Engine.load(tiny_bundle("llama"), threads=1), blocker / "sub", say=said.append).invariant
    assert "cannot save the row probe" in said[0]


def _args(drafter, defaulted):
    from mtpedge.runtime.drafters import parse_drafter

    return argparse.Namespace(drafter=parse_drafter(drafter), drafter_defaulted=defaulted, device="cpu")


def test_a_default_drafter_becomes_plain_decoding_where_rows_differ(float_activation_bundle, tmp_path,
                                                                   monkeypatch, capsys):
    from mtpedge.generate_cmd import settle_drafter

    monkeypatch.setenv("MTPEDGE_CACHE", str(tmp_path))
    engine = Engine.load(float_activation_bundle, threads=1)
    said = []
    args = _args("lookup", defaulted=True)
    settle_drafter(args, engine, said.append)
    assert args.drafter.name == "none" and "decoding plainly" in said[0]
    args = _args("lookup", defaulted=False)  # named by the user: kept, with a warning
    settle_drafter(args, engine, said.append)
    assert args.drafter.name == "lookup" and "may differ from plain decoding" in capsys.readouterr().err


def test_a_default_drafter_stays_where_rows_agree(tiny_bundle, tmp_path, monkeypatch):
    from mtpedge.generate_cmd import settle_drafter

    monkeypatch.setenv("MTPEDGE_CACHE", str(tmp_path))
    args = _args("lookup", defaulted=True)
    settle_drafter(args, Engine.load(tiny_bundle("llama"), threads=1), print)
    assert args.drafter.name == "lookup"


def test_drafting_where_the_probe_says_rows_differ_can_leave_plain_decoding(float_activation_bundle):
    """Why the fallback exists: on such a bundle the verifier checks drafts against the wide call's own rows,
    which are not plain decoding's. (Greedy output may still match on a given prompt; the rows do not.)"""
    engine = Engine.load(float_activation_bundle, threads=1)
    engine.prefill(np.arange(3, 20))
    chain = np.array([5, 6, 7, 8])
    wide = engine.run_block(engine.embed(chain), np.arange(-1, 3)).logits[0]
    one = engine.run_block(engine.embed(chain[:1]), np.array([-1])).logits[0]
    assert not np.array_equal(wide, one)

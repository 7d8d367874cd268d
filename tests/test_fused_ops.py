"""Graphs on onnxruntime's fused CPU ops (export/fused_ops.py) compute what the traced graphs compute.

Tiny random LLaMA, Qwen2 (q/k/v biases) and Qwen3 (q/k norms): every RMSNorm, residual add and rotary
embedding is fused, the fused graph matches the PyTorch reference as the traced one does, and a wider graph still
computes its first row bit for bit as the width-1 graph does (what lossless verification rests on).
"""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from mtpedge.export.fused_ops import fuse_decoder_ops
from mtpedge.export.onnx_graphs import trace_graph
from mtpedge.export.parity import graph_parity, parity_feeds
from mtpedge.export.quant_config import QuantConfig, fast_recipe
from mtpedge.models.loading import load_model
from mtpedge.runtime.bundle import BUNDLE_VERSION, read_manifest
from mtpedge.runtime.contract import CACHE_SLOTS, FUSED_OPS, GraphShape
from mtpedge.runtime.kernels import RECIPE_VERSION

ARCHS = ["llama", "qwen2", "qwen3"]
CONTEXT = 64


def _shape(cfg, width: int) -> GraphShape:
    return GraphShape(width, CONTEXT, cfg.hidden_size, cfg.head_dim, cfg.num_kv_heads, cfg.num_layers,
                      cfg.vocab_size)


def _fused(decoder, width: int) -> tuple[onnx.ModelProto, dict[str, int]]:
    model = trace_graph(decoder, _shape(decoder.cfg, width))
    return model, fuse_decoder_ops(model)


@pytest.mark.parametrize("arch", ARCHS)
def test_every_norm_residual_and_rotary_is_fused(arch, tiny_model_dir):
    decoder = load_model(tiny_model_dir(arch)).decoder
    layers = decoder.cfg.num_layers
    model, counts = _fused(decoder, 8)
    ops = Counter(node.op_type for node in model.graph.node)
    qk_norms = 2 * layers if decoder.cfg.qk_norm else 0
    # the first layer's input norm has no residual before it; every later norm and the final one has
    assert counts == {"skip_rms_norm": 2 * layers, "rms_norm": 1 + qk_norms, "rotary": 2 * layers}
    assert ops["SkipSimplifiedLayerNormalization"] == 2 * layers and ops["RotaryEmbedding"] == 2 * layers
    assert ops["Pow"] == ops["Sqrt"] == ops["Sub"] == 0  # no unfused RMSNorm or rotary chain is left


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("width,n_past", [(1, 0), (1, 30), (8, 5), (8, CONTEXT - 8)])
def test_fused_graphs_match_the_reference(arch, width, n_past, tiny_model_dir, tmp_path):
    decoder = load_model(tiny_model_dir(arch)).decoder
    model, _ = _fused(decoder, width)
    onnx.save_model(model, tmp_path / "fused.onnx")
    result = graph_parity(decoder, tmp_path / "fused.onnx", _shape(decoder.cfg, width), n_past)
    assert result["max_abs"] < 1e-4, result  # the traced graphs' own tolerance (test_export_parity)
    assert result["argmax_agree"] == 1.0


@pytest.mark.parametrize("arch", ARCHS)
def test_a_wider_fused_graph_computes_its_first_row_as_the_width_1_graph(arch, tiny_model_dir):
    decoder = load_model(tiny_model_dir(arch)).decoder
    sessions = {w: ort.InferenceSession(_fused(decoder, w)[0].SerializeToString(),
                                        providers=["CPUExecutionProvider"]) for w in (1, 8)}
    wide, _ = parity_feeds(decoder, _shape(decoder.cfg, 8), n_past=20)
    narrow = dict(wide)  # the same cache; slot 0 alone, seeing the cache and itself
    narrow["inputs_embeds"] = wide["inputs_embeds"][:, :1]
    narrow["rope_cos"], narrow["rope_sin"] = wide["rope_cos"][:, :, :1], wide["rope_sin"][:, :, :1]
    narrow["attention_bias"] = wide["attention_bias"][:, :, :1]
    narrow[CACHE_SLOTS] = wide[CACHE_SLOTS][:, :1]
    names = [o.name for o in sessions[1].get_outputs()]
    one = dict(zip(names, sessions[1].run(names, narrow), strict=True))
    many = dict(zip(names, sessions[8].run(names, wide), strict=True))
    assert np.array_equal(one["logits"][:, 0], many["logits"][:, 0])
    for name in names[1:]:  # new_key_l / new_value_l: (1, kv_heads, N, head_dim)
        assert np.array_equal(one[name][:, :, 0], many[name][:, :, 0]), name


def test_quantized_exports_asked_to_fuse_do_and_float32_exports_keep_standard_ops(tiny_model_dir, tiny_bundle,
                                                                                  tmp_path):
    from mtpedge.export.bundle_writer import ExportConfig, export_bundle

    config = ExportConfig(context=CONTEXT, prefill_width=8, decode_widths=(1, 4),
                          quantization=QuantConfig(weights="int8", block_size=16, fused_ops=True,
                                                   quality_report=False))
    quantized = export_bundle(tiny_model_dir("llama"), tmp_path / "q", config)
    manifest = read_manifest(quantized)
    assert manifest.extras[FUSED_OPS]["rotary"] == 2 * manifest.config.num_layers
    for graph in manifest.graphs:
        ops = {node.op_type for node in onnx.load(str(quantized / graph.file), load_external_data=False).graph.node}
        assert {"MatMulNBits", "SkipSimplifiedLayerNormalization", "RotaryEmbedding"} <= ops, graph.name
    float32 = tiny_bundle("llama")  # the QDQ converter's input: standard operators only
    assert FUSED_OPS not in read_manifest(float32).extras
    graph = read_manifest(float32).graphs[0]
    assert not {node.domain for node in onnx.load(str(float32 / graph.file), load_external_data=False).graph.node
                } - {"", "ai.onnx"}


def test_a_cached_fast_bundle_of_another_recipe_is_re_exported(tmp_path, monkeypatch):
    """Recipes that differ in operators (fused or not) or in graph layout (MatMuls side by side or not) share the
    cache folder's label: the quantization config the manifest records decides."""
    from dataclasses import asdict, replace
    from types import SimpleNamespace

    import mtpedge.bundles as bundles
    import mtpedge.export.bundle_writer as writer

    monkeypatch.setenv("MTPEDGE_CACHE", str(tmp_path))
    monkeypatch.setattr(bundles, "_lacks_shipped_masks", lambda folder: False)
    monkeypatch.setattr(bundles, "_predates_shipped_table", lambda folder: False)  # the fake manifests hold none
    monkeypatch.setattr(bundles, "_other_decode_widths", lambda folder: None)  # checked on its own
    exported = []
    monkeypatch.setattr(writer, "export_bundle", lambda model, folder, config, progress: exported.append(folder))
    monkeypatch.setattr(bundles, "read_manifest",  # only the field the check reads
                        lambda folder: SimpleNamespace(**json.loads((folder / "manifest.json").read_text())))
    folder = bundles.default_bundle_dir(None, 1024, bundles.fast_label())
    folder.mkdir(parents=True)
    fast = fast_recipe()  # FAST on this machine's kernels
    assert fast.fused_ops  # the fast recipe traces onnxruntime's fused operators (results/fast section 15)

    def cached(config, kernels_recipe: int = RECIPE_VERSION) -> None:
        extras = {"quantization": {"config": json.loads(json.dumps(asdict(config))),
                                   **({"kernels_recipe": kernels_recipe} if config.kernels == "mtpedge" else {})}}
        (folder / "manifest.json").write_text(json.dumps({"version": BUNDLE_VERSION, "extras": extras}))

    said = []
    for other in (replace(fast, fused_ops=False), replace(fast, side_by_side=False)):
        cached(other)
        assert bundles.ensure_bundle(None, None, 1024, say=said.append) == folder
        assert "another fast recipe" in said[-2]
    assert exported == [folder, folder]
    cached(fast)
    assert bundles.ensure_bundle(None, None, 1024, say=said.append) == folder and len(exported) == 2  # reused
    if fast.kernels == "mtpedge":  # made on an older recipe of mtpedge's kernels: exported again
        cached(fast, kernels_recipe=RECIPE_VERSION - 1)
        assert bundles.ensure_bundle(None, None, 1024, say=said.append) == folder and len(exported) == 3

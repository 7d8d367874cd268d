"""GPTQ rounding of the QDQ pass's 8-bit weights: same grid as round-to-nearest, smaller output error."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from mtpedge.export.qdq_gptq import gptq_round
from mtpedge.runtime.bundle import read_manifest


def correlated_inputs(rng: np.random.Generator, basis: np.ndarray, rows: int) -> np.ndarray:
    """Rows near a few strong directions, as a layer's real inputs are."""
    return rng.normal(size=(rows, len(basis))) @ basis + 0.1 * rng.normal(size=(rows, basis.shape[1]))


def test_gptq_stays_on_the_quantizers_grid_and_beats_rounding_to_nearest():
    rng = np.random.default_rng(0)
    k, n = 96, 40
    basis = rng.normal(size=(8, k))
    x = correlated_inputs(rng, basis, 400)
    w = rng.normal(0, 0.05, (k, n)).astype(np.float32)
    rounded, scales = gptq_round(w, x.T @ x, bits=8)
    np.testing.assert_allclose(scales, np.abs(w).max(axis=0) / 127, rtol=1e-6)
    steps = rounded / scales
    assert np.abs(steps - np.round(steps)).max() < 1e-3 and np.abs(np.round(steps)).max() <= 127
    nearest = np.round(w / scales) * scales
    test = correlated_inputs(np.random.default_rng(1), basis, 400)  # inputs like, but not, the calibration ones
    gptq_error = np.square(test @ (w - rounded)).mean()
    nearest_error = np.square(test @ (w - nearest)).mean()
    assert gptq_error < 0.7 * nearest_error


@pytest.fixture(scope="module")
def float_and_qdq(tiny_bundle, tmp_path_factory):
    from mtpedge.export.qdq_bundle import qdq_bundle

    src = tiny_bundle("llama")
    return src, qdq_bundle(src, tmp_path_factory.mktemp("gptq") / "qdq", quality=False)


def matmul_weights(folder, entry) -> dict[str, np.ndarray]:
    """MatMul node name -> its weight, dequantized if the graph is QDQ."""
    model = onnx.load(str(folder / entry.file))
    inits = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}
    producer = {out: n for n in model.graph.node for out in n.output}
    weights = {}
    for node in model.graph.node:
        if node.op_type != "MatMul":
            continue
        source = node.input[1]
        if source in inits:
            weights[node.name] = inits[source]
        elif source in producer and producer[source].op_type == "DequantizeLinear":
            q, scale = (inits.get(name) for name in producer[source].input[:2])
            if q is not None and q.dtype == np.int8 and q.ndim == 2:
                weights[node.name] = (q.astype(np.float32), scale)
    return weights


def test_qdq_bundle_keeps_the_gptq_weights(float_and_qdq):
    """The quantizer is handed GPTQ's grid values and scales: its int8 weights are GPTQ's, not its own
    rounding of the float weights (same grid, different points), and stay within a few steps of them."""
    src, qdq = float_and_qdq
    manifest = read_manifest(qdq)
    assert manifest.extras["qdq"]["gptq_weights"] > 0
    entry = manifest.graphs[0]
    floats, quantized = matmul_weights(src, entry), matmul_weights(qdq, entry)
    int8 = {name: value for name, value in quantized.items() if isinstance(value, tuple)}
    assert len(int8) == manifest.extras["qdq"]["gptq_weights"]
    moved = 0
    for name, (q, scale) in int8.items():
        np.testing.assert_allclose(scale, np.abs(floats[name]).max(axis=0) / 127, rtol=1e-5)
        nearest = np.round(floats[name] / scale)
        assert np.abs(q - nearest).max() <= 8
        moved += int((q != nearest).sum())
    assert moved > 0


def test_smoothing_keeps_the_float_graph_and_flattens_the_norm_outputs(tiny_bundle):
    """Gains divided, projection rows multiplied: the same function, smaller outliers at the norm outputs."""
    import onnxruntime as ort

    from mtpedge.export.qdq import fuse_rms_norms
    from mtpedge.export.qdq_smooth import apply_smoothing, channel_maxima, smoothable_norms, smoothing_factors

    bundle = tiny_bundle("llama")
    entry = next(g for g in read_manifest(bundle).graphs if g.width == 8)
    model = onnx.load(str(bundle / entry.file))
    fuse_rms_norms(model)
    rng = np.random.default_rng(0)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    feeds = [{i.name: rng.normal(0, 0.5, i.shape).astype(np.float32) for i in session.get_inputs()} for _ in range(2)]
    for call in feeds:  # the rows at cache columns 0 .. 7 (contract: distinct int64 columns)
        call["cache_slots"] = np.arange(entry.width, dtype=np.int64)[None]
    for call in feeds:
        call["inputs_embeds"][..., 3] *= 40  # one outlier channel, as real models have
    norms = smoothable_norms(model, [])
    assert len(norms) >= 2 * read_manifest(bundle).config.num_layers
    outputs = [next(n for n in model.graph.node if n.name == name).output[0] for name in norms]
    before = channel_maxima(model, feeds, outputs)
    apply_smoothing(model, smoothing_factors(model, feeds, []))
    after = channel_maxima(model, feeds, outputs)
    smoothed = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for want, got in zip(session.run(None, feeds[0]), smoothed.run(None, feeds[0]), strict=True):
        np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-4)
    spread = {name: v.max() / np.median(v) for name, v in before.items()}
    assert np.mean([after[name].max() / np.median(after[name]) < spread[name] for name in before]) > 0.9


def test_a_recipe_with_every_weight_16_bit_has_nothing_for_gptq_and_still_quantizes(tiny_bundle, tmp_path):
    """All seven projections and the LM head at 16 bits (the HTP's 16 x 8-bit products differ from their
    emulation, results/quant/smollm2.md): GPTQ has no 8-bit matrix to round, and the bundle is written."""
    from mtpedge.export.qdq import QdqConfig
    from mtpedge.export.qdq_bundle import qdq_bundle
    from mtpedge.export.qdq_gptq import gptq_weights, input_second_moments

    assert input_second_moments(onnx.ModelProto(), [{}], []) == {}
    assert gptq_weights(onnx.ModelProto(), [{}], {}) == {}
    every = ("lm_head", "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
    out = qdq_bundle(tiny_bundle("llama"), tmp_path / "qdq", QdqConfig(wide_weights=every), quality=False)
    manifest = read_manifest(out)
    assert manifest.extras["qdq"]["gptq_weights"] == 0
    int8 = [name for name, value in matmul_weights(out, manifest.graphs[0]).items()
            if isinstance(value, tuple)]
    assert int8 == []

"""mtpedge's own CPU kernel, com.mtpedge.BlockMatMul (runtime/kernels/, export/native_matmul.py): what it computes,
that a row does not depend on the other rows of a call, that its two code paths agree bit for bit, a bundle on it
that drafts losslessly, and the messages when it cannot be built or loaded."""

from __future__ import annotations

import dataclasses

import numpy as np
import onnxruntime as ort
import pytest
from gguf import GGMLQuantizationType as Q
from onnx import TensorProto, helper

from mtpedge.export.gguf_grid import decompose
from mtpedge.export.native_matmul import block_matmul_node, half_tables
from mtpedge.export.quant_config import QuantConfig
from mtpedge.export.quantize_bundle import quantize_bundle
from mtpedge.runtime import kernels
from mtpedge.runtime.bundle import BundleError
from mtpedge.runtime.engine import Engine

from .test_drafters import assert_quantized_bundle_drafts_losslessly, bundle_ops_and_quality
from .test_quant import random_gguf_rows


@pytest.fixture(scope="module")
def library():
    try:
        return kernels.library()
    except kernels.KernelsUnavailable as err:  # no C compiler, or no way to the headers
        pytest.skip(str(err))


def _grid(qtype, n: int, k: int, block: int, seed: int = 0):
    return decompose(random_gguf_rows(qtype, n, k, seed), qtype)[0].split_blocks(block)


def _session(library, weights, allow_half: bool = True) -> ort.InferenceSession:
    n, k = weights.shape
    node, inits = block_matmul_node("x", "y", weights, "w", allow_half)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, "T", k])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, "T", n])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid(kernels.DOMAIN, 1)])
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.register_custom_ops_library(str(library))
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def _model_of_the_kernel(weights, x: np.ndarray) -> np.ndarray:
    """Float64 model of the arithmetic: each row's activations in int8 per weight block (scale max|x| / 127), the
    codes against them centred on the grid's zero, and each block's minimum times the block's float sum."""
    n, k = weights.shape
    blocks = x.reshape(-1, k // weights.block_size, weights.block_size).astype(np.float64)
    amax = np.abs(blocks).max(-1, keepdims=True)
    q = np.clip(np.round(blocks * np.divide(127, amax, out=np.zeros_like(amax), where=amax > 0)), -127, 127)
    centred = weights.codes.reshape(n, -1, weights.block_size).astype(np.float64) - weights.zero
    y = np.einsum("rbi,nbi->rnb", q, centred) * (amax[:, None, :, 0] / 127) * weights.scales[None].astype(np.float64)
    y = y.sum(-1)
    if weights.offsets is not None:
        y += blocks.sum(-1) @ weights.offsets.T.astype(np.float64)
    return y


GRIDS = [(Q.Q4_1, 32), (Q.Q4_1, 16), (Q.Q4_0, 32), (Q.Q8_0, 16), (Q.Q8_0, 32)]
IDS = ["Q4_1", "Q4_1-b16", "Q4_0", "Q8_0-b16", "Q8_0"]


@pytest.mark.parametrize("qtype,block", GRIDS, ids=IDS)
def test_the_kernel_computes_the_grid_s_product_on_int8_activation_blocks(library, qtype, block):
    weights = _grid(qtype, 48, 256, block)
    session = _session(library, weights)
    rng = np.random.default_rng(1)
    for rows in (1, 5, 16):
        x = rng.standard_normal((1, rows, 256)).astype(np.float32)
        x[0, 0, :block] = 0  # an all-zero block quantizes to zeros, not to NaN
        y = session.run(None, {"x": x})[0][0]
        expected = _model_of_the_kernel(weights, x[0])
        assert np.abs(y - expected).max() <= 1e-5 * np.abs(expected).max(), rows
        # and the grid's float product, up to the activations' rounding
        exact = x[0].astype(np.float64) @ weights.dequantize().T.astype(np.float64)
        assert np.abs(y - exact).max() <= 0.02 * np.abs(exact).max()


@pytest.mark.parametrize("qtype,block", GRIDS, ids=IDS)
def test_a_row_gets_the_same_bits_at_every_width_on_both_code_paths(library, qtype, block, monkeypatch):
    """What lossless drafting rests on: a row of a 16-row call is bit for bit the one-row call's. The vector path
    (AVX-512 VNNI) and the portable path run the same operations per output, so they agree bit for bit too."""
    weights = _grid(qtype, 64, 512, block, seed=2)
    x = np.random.default_rng(3).standard_normal((1, 16, 512)).astype(np.float32) * 3
    results = {}
    for path in ("default", "portable"):
        if path == "portable":
            monkeypatch.setenv("MTPEDGE_KERNELS_PORTABLE", "1")  # read when a session creates its kernels
        session = _session(library, weights)
        wide = session.run(None, {"x": x})[0]
        for width in (1, 2, 4):
            for start in range(0, 16, width):
                part = session.run(None, {"x": x[:, start:start + width]})[0]
                assert np.array_equal(part, wide[:, start:start + width]), (path, width, start)
        results[path] = wide
    assert np.array_equal(results["default"], results["portable"])


@pytest.mark.parametrize("qtype,block", GRIDS, ids=IDS)
def test_float16_tables_hold_a_gguf_grid_exactly_and_compute_the_same_bits(library, qtype, block):
    """A GGUF grid's scales and minima are float16 in the file: BlockMatMulF16 reads them at 20 bytes per 32 4-bit
    weights instead of 24 and computes what the float32 tables compute, bit for bit."""
    weights = _grid(qtype, 48, 256, block, seed=4)
    assert half_tables(weights) is not None
    assert block_matmul_node("x", "y", weights, "w")[0].op_type == "BlockMatMulF16"
    assert block_matmul_node("x", "y", weights, "w", allow_half=False)[0].op_type == "BlockMatMul"
    half, full = _session(library, weights), _session(library, weights, allow_half=False)
    x = np.random.default_rng(5).standard_normal((1, 7, 256)).astype(np.float32)
    assert np.array_equal(half.run(None, {"x": x})[0], full.run(None, {"x": x})[0])
    rtn = dataclasses.replace(weights, scales=weights.scales * np.float32(1.0001))  # not float16 any more
    assert half_tables(rtn) is None


def test_shapes_the_kernel_does_not_take_are_refused_when_the_session_loads(library):
    weights = _grid(Q.Q4_1, 48, 256, 32)
    node, inits = block_matmul_node("x", "y", weights, "w")
    for attribute in node.attribute:
        if attribute.name == "N":
            attribute.i = 40  # not a multiple of 16
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, "T", 256])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, "T", 40])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid(kernels.DOMAIN, 1)])
    options = ort.SessionOptions()
    options.register_custom_ops_library(str(library))
    with pytest.raises(Exception, match="multiple of 16"):
        ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def _attention_session(library, heads: int, kv_heads: int, rows: int, context: int) -> ort.InferenceSession:
    dims = {"q": [1, heads, rows, 64], "new_key": [1, kv_heads, rows, 64], "new_value": [1, kv_heads, rows, 64],
            "past_key": [1, kv_heads, context, 64], "past_value": [1, kv_heads, context, 64]}
    inputs = [helper.make_tensor_value_info(name, TensorProto.FLOAT, shape) for name, shape in dims.items()]
    inputs += [helper.make_tensor_value_info("cache_slots", TensorProto.INT64, [1, rows]),
               helper.make_tensor_value_info("attention_bias", TensorProto.FLOAT, [1, 1, rows, context])]
    node = helper.make_node("CacheAttention", [i.name for i in inputs], ["out", "present_key", "present_value"],
                            domain=kernels.DOMAIN, scale=0.125, masked_below=-5e8)
    outputs = [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, rows, heads * 64]),
               helper.make_tensor_value_info("present_key", TensorProto.FLOAT, dims["past_key"]),
               helper.make_tensor_value_info("present_value", TensorProto.FLOAT, dims["past_value"])]
    model = helper.make_model(helper.make_graph([node], "g", inputs, outputs),
                              opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(kernels.DOMAIN, 1)])
    options = ort.SessionOptions()
    options.register_custom_ops_library(str(library))
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


@pytest.mark.parametrize("path", ["default", "portable"])
def test_cache_attention_attends_over_the_open_columns_alike_at_every_width_and_bucket(library, path, monkeypatch):
    """CacheAttention (9 query heads over 3 key/value heads, as SmolLM2) writes the block's rows into the cache and
    attends each row over the columns its bias opens: the softmax attention of the traced graph, and a row's bits do
    not depend on the other rows of the call or on how many hidden columns the bucket has."""
    from mtpedge.runtime.attention_bias import block_inputs

    if path == "portable":
        monkeypatch.setenv("MTPEDGE_KERNELS_PORTABLE", "1")
    rng = np.random.default_rng(7)
    heads, kv, n_past, rows = 9, 3, 21, 4
    cache = {name: rng.standard_normal((1, kv, 64, 64)).astype(np.float32) for name in ("past_key", "past_value")}
    feeds = {"q": rng.standard_normal((1, heads, rows, 64)).astype(np.float32),
             "new_key": rng.standard_normal((1, kv, rows, 64)).astype(np.float32),
             "new_value": rng.standard_normal((1, kv, rows, 64)).astype(np.float32)}
    bias, slots = block_inputs(n_past, np.tril(np.ones((rows, rows), bool)), rows, 64, -1e9)  # a chain
    out, present_key, present_value = _attention_session(library, heads, kv, rows, 64).run(
        None, {**feeds, **cache, "cache_slots": slots, "attention_bias": bias})
    keys, values = cache["past_key"].copy(), cache["past_value"].copy()
    keys[:, :, n_past:n_past + rows], values[:, :, n_past:n_past + rows] = feeds["new_key"], feeds["new_value"]
    assert np.array_equal(present_key, keys) and np.array_equal(present_value, values)
    for h in range(heads):  # float64 reference
        g = h // (heads // kv)
        scores = (feeds["q"][0, h].astype(np.float64) * 0.125) @ keys[0, g].T.astype(np.float64) + bias[0, 0]
        p = np.exp(scores - scores.max(-1, keepdims=True))
        expected = (p / p.sum(-1, keepdims=True)) @ values[0, g].astype(np.float64)
        assert np.allclose(out[0, :, h * 64:(h + 1) * 64], expected, atol=2e-6, rtol=1e-5), h
    one_row = _attention_session(library, heads, kv, 1, 64)
    wide_bucket = _attention_session(library, heads, kv, 1, 128)
    for t in range(rows):  # each row again as plain decoding computes it, in a bucket of 64 and of 128 columns
        row = {"q": feeds["q"][:, :, t:t + 1], "new_key": feeds["new_key"][:, :, t:t + 1],
               "new_value": feeds["new_value"][:, :, t:t + 1], "cache_slots": slots[:, t:t + 1]}
        alone = one_row.run(None, {**row, "past_key": keys, "past_value": values,
                                   "attention_bias": bias[:, :, t:t + 1]})[0]
        assert np.array_equal(alone[0, 0], out[0, t]), t
        padded = np.full((1, 1, 1, 128), -1e9, np.float32)
        padded[..., :64] = bias[:, :, t:t + 1]
        wider = wide_bucket.run(None, {**row, "past_key": np.pad(keys, ((0, 0), (0, 0), (0, 64), (0, 0))),
                                       "past_value": np.pad(values, ((0, 0), (0, 0), (0, 64), (0, 0))),
                                       "attention_bias": padded})[0]
        assert np.array_equal(wider[0, 0], out[0, t]), t


def test_the_kernels_take_only_int8_activation_recipes():
    with pytest.raises(ValueError, match="int8 blocks"):
        QuantConfig("gguf", accuracy_level=0, kernels="mtpedge")
    with pytest.raises(ValueError, match="kernels 'blas' are unknown"):
        QuantConfig("gguf", accuracy_level=4, kernels="blas")
    assert QuantConfig("int4", accuracy_level=4, kernels="mtpedge").label == "int4-b32-a4-mtk"


@pytest.fixture(scope="module")
def native_bundle(library, tiny_bundle, tmp_path_factory):
    config = QuantConfig("int8", block_size=16, accuracy_level=4, fused_ops=True, kernels="mtpedge")
    return quantize_bundle(tiny_bundle("llama"), tmp_path_factory.mktemp("native") / "b", config)


def test_a_bundle_on_the_kernels_holds_no_onnxruntime_products_and_keeps_quality(native_bundle):
    ops, manifest = bundle_ops_and_quality(native_bundle)
    assert {g.precision for g in manifest.graphs} == {"int8-b16-a4-fused-mtk"}
    for name, graph_ops in ops.items():
        assert "BlockMatMul" in graph_ops and not graph_ops & {"MatMulNBits", "ReduceSum"}, name  # minima inside
        assert "CacheAttention" in graph_ops and not graph_ops & {"ScatterElements", "Softmax"}, name


def test_a_bundle_on_the_kernels_drafts_losslessly(native_bundle):
    assert_quantized_bundle_drafts_losslessly(native_bundle, seed=13)


def test_a_bundle_on_the_kernels_says_what_to_do_where_the_library_is_missing(native_bundle, monkeypatch):
    import mtpedge.runtime.graphs as graphs

    def unavailable(build=True):
        raise kernels.KernelsUnavailable("no C compiler (cc/gcc/clang) to build mtpedge's kernels")

    monkeypatch.setattr(graphs, "library", unavailable)
    with pytest.raises(BundleError, match="no C compiler.*re-export the bundle with --kernels onnxruntime"):
        Engine.load(native_bundle, threads=1).graphs.load_all()


def test_the_library_build_names_what_is_missing(tmp_path, monkeypatch):
    monkeypatch.setenv("MTPEDGE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("MTPEDGE_ORT_INCLUDE", str(tmp_path))  # a folder without the header
    with pytest.raises(kernels.KernelsUnavailable, match="holds no onnxruntime_c_api.h"):
        kernels.library()
    with pytest.raises(kernels.KernelsUnavailable, match="not built.*python -m mtpedge.runtime.kernels"):
        kernels.library(build=False)
    blocked = tmp_path / "file"
    blocked.write_text("")
    monkeypatch.setenv("MTPEDGE_CACHE", str(blocked / "cache"))  # under a file: not writable
    monkeypatch.delenv("MTPEDGE_ORT_INCLUDE")
    with pytest.raises(kernels.KernelsUnavailable, match="set MTPEDGE_CACHE to a writable folder"):
        kernels.library()  # before any header is fetched


def test_the_default_stays_on_onnxruntime_s_kernels_when_asked_or_when_the_library_fails(monkeypatch):
    pays = kernels.native_kernels_pay.__wrapped__  # uncached
    monkeypatch.setenv("MTPEDGE_KERNELS", "onnxruntime")
    assert pays() is False
    monkeypatch.delenv("MTPEDGE_KERNELS")

    def broken(build=True):
        raise kernels.KernelsUnavailable("no C compiler")

    monkeypatch.setattr(kernels, "library", broken)
    assert pays() is False

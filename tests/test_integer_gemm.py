"""Weight products on the integer GEMM (export/integer_gemm.py): the weights they start from, rows that do not depend
on the other rows of a call, and a bundle on them that drafts losslessly."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from gguf import GGMLQuantizationType as Q

from mtpedge.export.integer_gemm import dequantized_weights, int8_columns, to_integer_gemm
from mtpedge.export.quant_config import QuantConfig
from mtpedge.export.quantize_bundle import quantize_bundle
from mtpedge.runtime.bundle import read_manifest

from .test_drafters import assert_quantized_bundle_drafts_losslessly, bundle_ops_and_quality
from .test_quant import nbits_graph


def _session(model):
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


@pytest.mark.parametrize("qtype,block", [(Q.Q4_1, 32), (Q.Q4_1, 16), (Q.Q4_0, 32), (Q.Q8_0, 16)],
                         ids=["Q4_1", "Q4_1-b16", "Q4_0", "Q8_0-b16"])
def test_the_weights_are_the_grids_own_block_minima_included(qtype, block):
    model, weights = nbits_graph(qtype, 256, 48, block)
    inits = {t.name: t for t in model.graph.initializer}
    nbits = next(n for n in model.graph.node if n.op_type == "MatMulNBits")
    add = next((n for n in model.graph.node if n.op_type == "Add" and nbits.output[0] in n.input), None)
    minima = None
    if add is not None:  # Q4_1: the minima come as a MatMul over block sums, added after
        table = next(n for n in model.graph.node if n.op_type == "MatMul" and n.output[0] in add.input)
        from onnx import numpy_helper

        minima = numpy_helper.to_array(inits[table.input[1]])
    assert (add is not None) == (qtype == Q.Q4_1)
    np.testing.assert_allclose(dequantized_weights(nbits, inits, minima), weights, rtol=0, atol=1e-6)


def test_int8_columns_round_each_weight_to_within_half_a_step():
    weights = np.random.default_rng(1).normal(0, 0.3, (200, 40)).astype(np.float32)
    codes, scale = int8_columns(weights)
    assert codes.dtype == np.int8 and np.abs(codes).max() == 127
    assert np.all(np.abs(codes * scale - weights) <= scale / 2 + 1e-7)


@pytest.mark.parametrize("qtype", [Q.Q4_1, Q.Q8_0], ids=lambda q: q.name)
def test_a_row_gets_the_same_bits_at_every_width_and_stays_near_the_float_product(qtype):
    """What lossless drafting on these graphs rests on: integer sums are exact, the rest is per row or per element,
    so a row's output does not depend on the other rows of the call (unlike the float kernels; tests/test_quant.py
    for MatMulNBits). And the two roundings (int8 weights per column, uint8 activations per row) stay close."""
    model, weights = nbits_graph(qtype, 1536, 96, 32)
    assert to_integer_gemm(model) == 2
    assert {n.op_type for n in model.graph.node} >= {"MatMulInteger"}
    assert not {"MatMulNBits", "ReduceSum"} & {n.op_type for n in model.graph.node}
    sess = _session(model)
    x = np.random.default_rng(5).normal(0, 1, (1, 16, 1536)).astype(np.float32)
    x[0, 3] = 0.0  # an all-zero row
    rows = [sess.run(["y1"], {"x": x[:, i:i + 1]})[0][0, 0] for i in range(16)]
    for width in (2, 4, 16):
        wide = sess.run(["y1"], {"x": x[:, :width]})[0][0]
        assert all(np.array_equal(wide[i], rows[i]) for i in range(width)), width
    exact = x[0] @ weights
    assert np.array_equal(rows[3], np.zeros_like(rows[3]))
    error = np.abs(np.stack(rows) - exact).max() / np.abs(exact).max()
    assert error < 0.02, error


def test_a_graph_without_nbits_products_is_left_alone(tiny_bundle):
    import onnx

    manifest = read_manifest(tiny_bundle("llama"))
    model = onnx.load(str(tiny_bundle("llama") / manifest.graphs[0].file))
    before = len(model.graph.node)
    assert to_integer_gemm(model) == 0 and len(model.graph.node) == before


@pytest.fixture(scope="module")
def igemm_bundle(tiny_bundle, tmp_path_factory):
    config = QuantConfig("int8", block_size=16, accuracy_level=4, fused_ops=True, integer_gemm=True)
    return quantize_bundle(tiny_bundle("llama"), tmp_path_factory.mktemp("igemm") / "b", config)


def test_an_integer_gemm_bundle_reports_its_quality_and_holds_no_nbits_products(igemm_bundle):
    ops, manifest = bundle_ops_and_quality(igemm_bundle)
    assert {g.precision for g in manifest.graphs} == {"int8-b16-a4-fused-igemm"}
    for name, graph_ops in ops.items():
        assert "MatMulInteger" in graph_ops and "MatMulNBits" not in graph_ops, name


def test_an_integer_gemm_bundle_drafts_losslessly(igemm_bundle):
    assert_quantized_bundle_drafts_losslessly(igemm_bundle, seed=11)

"""Weight quantization: exact GGUF grids, round-to-nearest blocks, the MatMulNBits rewrite, quantized bundles."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, dequantize, quants
from onnx import TensorProto, helper, numpy_helper

from mtpedge.export.block_weights import BlockWeights, quantize_rtn
from mtpedge.export.gguf_grid import FORMATS, decompose
from mtpedge.export.matmul_nbits import MatMulRewriter, minima_blocks, weight_matmuls
from mtpedge.export.quant_config import QuantConfig
from mtpedge.export.quantize_bundle import quantize_bundle
from mtpedge.runtime.bundle import read_manifest
from mtpedge.runtime.engine import Engine

Q = GGMLQuantizationType
SIMPLE = [Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1, Q.Q8_0]  # gguf-py can quantize these
K_QUANTS = {Q.Q4_K: (0, 2), Q.Q5_K: (0, 2), Q.Q6_K: (208,)}  # offsets of their fp16 super-block scales


def random_gguf_rows(qtype: GGMLQuantizationType, n: int, k: int, seed: int = 0) -> np.ndarray:
    """(n, bytes per row) raw blocks: quantized random weights, or random bytes with sane scales (K-quants)."""
    rng = np.random.default_rng(seed)
    if qtype in SIMPLE:
        return quants.quantize(rng.normal(0, 0.5, (n, k)).astype(np.float32), qtype)
    elems, size = GGML_QUANT_SIZES[qtype]
    blocks = rng.integers(0, 256, (n * k // elems, size), dtype=np.uint8)
    for offset in K_QUANTS[qtype]:  # random bytes can spell inf/NaN as fp16 scales
        scales = rng.uniform(-0.02, 0.02, blocks.shape[0]).astype(np.float16)
        blocks[:, offset:offset + 2] = scales.view(np.uint8).reshape(-1, 2)
    return blocks.reshape(n, -1)


@pytest.mark.parametrize("qtype", sorted(FORMATS, key=lambda q: q.name), ids=lambda q: q.name)
def test_gguf_grid_rebuilds_gguf_dequantization_exactly(qtype):
    raw = random_gguf_rows(qtype, 6, 512)
    weights, w = decompose(raw, qtype)
    np.testing.assert_array_equal(w, dequantize(raw, qtype).reshape(6, 512))
    np.testing.assert_allclose(weights.dequantize(), w, rtol=0, atol=1e-6 * float(np.abs(w).max()))
    assert weights.bits == FORMATS[qtype].bits and weights.block_size == FORMATS[qtype].sub_block
    has_minimum = qtype in (Q.Q4_1, Q.Q5_1, Q.Q4_K, Q.Q5_K)
    assert (weights.offsets is not None) == has_minimum  # symmetric formats take MatMulNBits' fast path


def test_rtn_error_is_within_half_a_step():
    w = np.random.default_rng(1).normal(0, 1, (5, 64)).astype(np.float32)
    for bits in (4, 8):
        q = quantize_rtn(w, bits, 16)
        step = np.repeat(q.scales, 16, axis=1)
        assert np.all(np.abs(q.dequantize() - w) <= step / 2 + 1e-7)
        assert q.codes.max() < 1 << bits and q.offsets is None
    with pytest.raises(ValueError, match="multiple of the block size"):
        quantize_rtn(w[:, :40], 4, 32)


def _two_matmul_graph(k: int, n: int, w1: np.ndarray, w2: np.ndarray) -> onnx.ModelProto:
    """y1 = x @ w1, y2 = x @ w2 (sharing x, as q/k/v do)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, k])
    outs = [helper.make_tensor_value_info(f"y{i}", TensorProto.FLOAT, [1, 3, n]) for i in (1, 2)]
    nodes = [helper.make_node("MatMul", ["x", f"w{i}"], [f"y{i}"]) for i in (1, 2)]
    inits = [numpy_helper.from_array(w, f"w{i}") for i, w in ((1, w1), (2, w2))]
    graph = helper.make_graph(nodes, "g", [x], outs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("qtype", [Q.Q4_0, Q.Q4_1, Q.Q4_K, Q.Q6_K, Q.Q8_0], ids=lambda q: q.name)
def test_matmul_nbits_rewrite_computes_x_times_the_grid(qtype):
    k, n = 256, 24
    grids = [decompose(random_gguf_rows(qtype, n, k, seed), qtype)[0] for seed in (1, 2)]
    model = _two_matmul_graph(k, n, *(np.ascontiguousarray(g.dequantize().T) for g in grids))
    rewriter = MatMulRewriter(model)
    for matmul, grid in zip(weight_matmuls(model), grids, strict=True):
        rewriter.replace(matmul.node, grid, accuracy_level=0)
    rewriter.finish()
    ops = [node.op_type for node in model.graph.node]
    assert ops.count("MatMulNBits") == 2 and "w1" not in {t.name for t in model.graph.initializer}
    assert ops.count("ReduceSum") == (1 if grids[0].offsets is not None else 0)  # one block sum shared
    x = np.random.default_rng(3).normal(0, 1, (1, 3, k)).astype(np.float32)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for got, grid in zip(sess.run(None, {"x": x}), grids, strict=True):
        want = x @ grid.dequantize().T
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-5 * float(np.abs(want).max()))


def test_split_blocks_keep_the_gguf_grid_bit_for_bit():
    """Q4_1's 32-input blocks as 16-input ones (each half keeps the block's scale and minimum): the same weights."""
    grid = decompose(random_gguf_rows(Q.Q4_1, 8, 128), Q.Q4_1)[0]
    fine = grid.split_blocks(16)
    assert fine.block_size == 16 and fine.scales.shape == (8, 8) and fine.offsets.shape == (8, 8)
    assert np.array_equal(fine.dequantize(), grid.dequantize())
    assert np.array_equal(fine.packed().reshape(8, -1), grid.packed().reshape(8, -1))
    with pytest.raises(ValueError, match="does not divide"):
        grid.split_blocks(24)


def test_a_split_grid_adds_its_minima_per_original_block():
    """Q4_1 split into 16-input blocks keeps one minimum per 32 inputs: the correction sums x per 32 and its MatMul
    reads half the rows, and the graph still computes x @ grid."""
    k, n = 256, 24
    fine = decompose(random_gguf_rows(Q.Q4_1, n, k, 1), Q.Q4_1)[0].split_blocks(16)
    assert minima_blocks(fine)[1] == 32 and minima_blocks(fine)[0].shape == (n, k // 32)
    model = _two_matmul_graph(k, n, *(np.ascontiguousarray(fine.dequantize().T),) * 2)
    rewriter = MatMulRewriter(model)
    rewriter.replace(weight_matmuls(model)[0].node, fine, accuracy_level=4)
    rewriter.finish()
    minima = next(t for t in model.graph.initializer if t.name.endswith(".offsets"))
    assert list(minima.dims) == [k // 32, n]
    x = np.random.default_rng(3).normal(0, 1, (1, 3, k)).astype(np.float32)
    got = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(["y1"], {"x": x})[0]
    want = x @ fine.dequantize().T
    np.testing.assert_allclose(got, want, rtol=0, atol=2e-2 * float(np.abs(want).max()))  # int8 activations


def _cpu_flags() -> set[str]:
    from mtpedge.bench.machine import describe_machine

    return set(describe_machine()["cpu_flags"])


def nbits_graph(qtype: GGMLQuantizationType, k: int, n: int, block: int) -> tuple[onnx.ModelProto, np.ndarray]:
    """A two-MatMul graph (x -> y1, y2; any number of rows T) on one GGUF grid in blocks of `block`, rewritten to
    MatMulNBits at accuracy level 4; and the grid's (K, N) weights."""
    grid = decompose(random_gguf_rows(qtype, n, k), qtype)[0].split_blocks(block)
    weights = np.ascontiguousarray(grid.dequantize().T)
    model = _two_matmul_graph(k, n, weights, weights)
    model.graph.input[0].type.tensor_type.shape.dim[1].dim_param = "T"
    for out in model.graph.output:
        out.type.tensor_type.shape.dim[1].dim_param = "T"
    rewriter = MatMulRewriter(model)
    for matmul in weight_matmuls(model):
        rewriter.replace(matmul.node, grid, accuracy_level=4)
    rewriter.finish()
    return model, weights


@pytest.mark.parametrize("block_size", [16, 32])
def test_int8_activation_kernels_compute_a_row_alike_at_every_width(block_size):
    """What lossless drafting on the fast bundle rests on, and where it holds: MatMulNBits at accuracy level 4
    (each row's activations quantized alone, per weight block) gives a row the same bits whether the call has 1, 2,
    4 or 16 rows, with 16-input blocks on every CPU measured and with 32-input blocks on AVX-512 VNNI; an AVX2-only
    CPU runs one-row products with 32-input blocks through a kernel of its own (onnxruntime 1.32; ~1e-5 apart), so
    the runtime probes each bundle on its machine (runtime/row_probe.py). (At level 0, float activations, one-row
    calls take another kernel everywhere.)"""
    flags = _cpu_flags()
    if block_size == 32 and "avx512_vnni" not in flags and "avx512f" in flags:
        pytest.skip("32-input blocks measured on AVX-512 VNNI (alike) and AVX2 only (not alike), not on this ISA")
    alike = block_size == 16 or "avx512_vnni" in flags
    k = 1536
    model, _ = nbits_graph(Q.Q4_1, k, 96, block_size)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    x = np.random.default_rng(5).normal(0, 1, (1, 16, k)).astype(np.float32)
    one = sess.run(["y1"], {"x": x[:, :1]})[0][0, 0]
    for width in (2, 4, 16):
        assert np.array_equal(sess.run(["y1"], {"x": x[:, :width]})[0][0, 0], one) == alike, width


@pytest.mark.parametrize("level", [0, 4])
@pytest.mark.parametrize("qtype", [Q.Q4_1, Q.Q4_0], ids=lambda q: q.name)
def test_matmuls_of_one_input_side_by_side_compute_each_output_bit_for_bit(qtype, level):
    """q/k/v (and gate/up) read one input: one MatMulNBits over their weights side by side, split back, gives
    each output the very bits its own MatMulNBits gives, at one row and at several (export/matmul_nbits.py)."""
    k, n = 256, 40
    grids = [decompose(random_gguf_rows(qtype, n, k, seed), qtype)[0] for seed in (1, 2)]
    sessions = []
    for side_by_side in (False, True):
        model = _two_matmul_graph(k, n, *(np.ascontiguousarray(g.dequantize().T) for g in grids))
        model.graph.input[0].type.tensor_type.shape.dim[1].dim_param = "T"
        for out in model.graph.output:
            out.type.tensor_type.shape.dim[1].dim_param = "T"
        rewriter = MatMulRewriter(model)
        matmuls = weight_matmuls(model)
        if side_by_side:
            rewriter.replace_side_by_side([m.node for m in matmuls], grids, accuracy_level=level)
        else:
            for matmul, grid in zip(matmuls, grids, strict=True):
                rewriter.replace(matmul.node, grid, accuracy_level=level)
        rewriter.finish()
        ops = [node.op_type for node in model.graph.node]
        assert ops.count("MatMulNBits") == (1 if side_by_side else 2) and ops.count("Split") == side_by_side
        sessions.append(ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]))
    x = np.random.default_rng(3).normal(0, 1, (1, 4, k)).astype(np.float32)
    for rows in (1, 4):
        apart, together = (s.run(["y1", "y2"], {"x": x[:, :rows]}) for s in sessions)
        assert all(np.array_equal(a, b) for a, b in zip(apart, together, strict=True)), rows
    with pytest.raises(ValueError, match="side by side"):
        BlockWeights.side_by_side([grids[0], grids[0].split_blocks(16)])


def test_block_weights_refuses_bad_shapes():
    with pytest.raises(ValueError, match="multiple of the block size"):
        BlockWeights(np.zeros((2, 40), np.uint8), np.ones((2, 1), np.float32), None, 4, 32, "t")
    with pytest.raises(ValueError, match="exceeds 4 bits"):
        BlockWeights(np.full((2, 32), 16, np.uint8), np.ones((2, 1), np.float32), None, 4, 32, "t")


# ---- a tiny model whose float weights are a GGUF file's grid, and bundles made from it ----

GGUF_TYPES = {"q_proj": Q.Q4_1, "k_proj": Q.Q4_0, "v_proj": Q.Q8_0, "o_proj": Q.Q4_1, "gate_proj": Q.Q5_0,
              "up_proj": Q.Q4_1, "down_proj": Q.Q8_0, "lm_head": Q.Q8_0}


@pytest.fixture(scope="module")
def gguf_tiny(tmp_path_factory):
    """(float32 bundle, GGUF file holding its weights' grids) for a 2-layer LLaMA with 32-divisible sizes."""
    import gguf
    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig

    from mtpedge.export.bundle_writer import ExportConfig, export_bundle
    from mtpedge.models.tiny import tiny_tokenizer

    folder = tmp_path_factory.mktemp("gguf_tiny")
    tokenizer = tiny_tokenizer()
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=16, tie_word_embeddings=False,
                         rms_norm_eps=1e-5, bos_token_id=1, eos_token_id=2, pad_token_id=0,
                         rope_parameters={"rope_type": "default", "rope_theta": 10000.0})
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    writer = gguf.GGUFWriter(str(folder / "tiny.gguf"), arch="llama")
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "norm" in name:
                param.copy_(1.0 + 0.1 * torch.randn_like(param))
                continue
            param.normal_(0.0, 0.15)
            kind = next((key for key in GGUF_TYPES if key in name), None)
            if kind and param.ndim == 2:
                raw = quants.quantize(param.numpy(), GGUF_TYPES[kind])
                param.copy_(torch.from_numpy(dequantize(raw, GGUF_TYPES[kind]).reshape(param.shape)))
                writer.add_tensor(name, raw, raw_dtype=GGUF_TYPES[kind])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    model.save_pretrained(folder / "hf")
    tokenizer.save_pretrained(folder / "hf")
    bundle = export_bundle(folder / "hf", folder / "float", ExportConfig(context=128, prefill_width=16,
                                                                          decode_widths=(1, 4)))
    return bundle, folder / "tiny.gguf"


def _logits(bundle, ids):
    from mtpedge.export.quality import sequence_logits

    return sequence_logits(Engine.load(bundle), ids)


def test_gguf_exact_bundle_matches_the_float_bundle(gguf_tiny, tmp_path):
    float_bundle, gguf_file = gguf_tiny
    out = quantize_bundle(float_bundle, tmp_path / "q", QuantConfig(weights="gguf"), gguf_file)
    manifest = read_manifest(out)
    assert {g.precision for g in manifest.graphs} == {"gguf"}
    info = manifest.extras["quantization"]
    assert info["tensors"] == {"gguf:Q4_1": 6, "gguf:Q4_0": 2, "gguf:Q8_0": 5, "gguf:Q5_0": 2}
    assert info["bytes"] < info["float_bundle_bytes"]
    model = onnx.load(str(out / manifest.graphs[0].file), load_external_data=False)
    assert sum(n.op_type == "MatMulNBits" for n in model.graph.node) == 15
    # the only float MatMul weights left are the Q4_1 minima (6 tensors, each (K/32, N))
    assert sorted(m.weight_name.endswith(".offsets") for m in weight_matmuls(model)) == [True] * 6
    ids = list(np.random.default_rng(0).integers(3, 300, 40))
    ref, got = _logits(float_bundle, ids), _logits(out, ids)
    # 8-bit blocks (Q8_0, Q5_0) multiply int8-quantized activations (accuracy_level 4): close, not exact
    assert np.abs(got - ref).max() < 0.05 * np.abs(ref).max() and np.abs(got - ref).mean() < 0.005 * np.abs(ref).max()
    quality = manifest.extras["quality"]
    assert quality["top1_agreement"] >= 0.95 and set(quality["latency_ms"]) == {"1", "4", "16"}
    ppl = quality["perplexity"]
    assert ppl["quantized"] == pytest.approx(ppl["float32"], rel=0.02)


def test_gguf_grid_with_a_float_output_layer(gguf_tiny, tmp_path):
    float_bundle, gguf_file = gguf_tiny
    config = QuantConfig(weights="gguf", output_layer="float32", quality_report=False)
    out = quantize_bundle(float_bundle, tmp_path / "q", config, gguf_file)
    manifest = read_manifest(out)
    assert manifest.extras["quantization"]["tensors"]["float32"] == 1 and "quality" not in manifest.extras
    assert {g.precision for g in manifest.graphs} == {"gguf+out:float32"}
    ids = list(np.random.default_rng(1).integers(3, 300, 20))
    ref, got = _logits(float_bundle, ids), _logits(out, ids)
    assert (ref.argmax(-1) == got.argmax(-1)).all()


def test_a_gguf_that_is_not_the_source_is_refused(gguf_tiny, tiny_bundle, tmp_path):
    _, gguf_file = gguf_tiny
    with pytest.raises(ValueError, match="matches no quantized tensor of the GGUF"):
        quantize_bundle(tiny_bundle("llama"), tmp_path / "q", QuantConfig(weights="gguf", block_size=16), gguf_file)
    assert not (tmp_path / "q").exists()


@pytest.mark.parametrize("bits", ["int8", "int4"])
def test_rtn_bundle_runs_and_reports(tiny_bundle, tmp_path, bits):
    float_bundle = tiny_bundle("qwen2")  # tied embeddings, q/k/v biases; K = 48 and 80: 16-blocks
    config = QuantConfig(weights=bits, output_layer="int8", block_size=16)
    out = quantize_bundle(float_bundle, tmp_path / "q", config)
    manifest = read_manifest(out)
    assert {g.precision for g in manifest.graphs} == {f"{bits}-b16+out:int8"}
    quality = manifest.extras["quality"]
    ppl = quality["perplexity"]
    assert ppl["quantized"] > 0 and ppl["float32"] > 0 and 0 <= quality["top1_agreement"] <= 1
    assert quality.get("tau_note") or quality["tau"]  # each registered drafter's tau, or why none
    if bits == "int8":  # int8 blocks of a random model keep the float argmax nearly everywhere
        assert quality["top1_agreement"] >= 0.9
    with pytest.raises(ValueError, match="already quantized"):
        quantize_bundle(out, tmp_path / "again", config)


def test_quant_config_refuses_unknown_settings():
    with pytest.raises(ValueError, match="weight precision"):
        QuantConfig(weights="int3")
    with pytest.raises(ValueError, match="power of two"):
        QuantConfig(weights="int4", block_size=24)


def test_export_cli_quantizes_with_the_precision_option(tiny_model_dir, tmp_path):
    from mtpedge.main import main

    out = tmp_path / "b"
    argv = [str(tiny_model_dir("llama")), "--out", str(out), "--context", "64", "--prefill-width", "8",
            "--decode-widths", "1,4", "--precision", "int4", "--block-size", "16", "--output-layer", "float32",
            "--no-quality-report"]
    assert main(["export", *argv]) == 0
    assert {g.precision for g in read_manifest(out).graphs} == {"int4-b16+out:float32"}
    assert not list(tmp_path.glob(".b.*"))  # the float intermediate is gone
    assert main(["export", str(tiny_model_dir("llama")), "--out", str(tmp_path / "c"), "--precision", "gguf"]) == 2


@pytest.mark.slow
def test_smollm2_gguf_grid_keeps_the_float_argmax(smollm2_float_bundle, tmp_path):
    """The real Q4_1 + Q8_0 GGUF: every MatMul found in the file (q/k rows permuted by the loader), top-1 kept."""
    from mtpedge.export.quality import sequence_logits
    from mtpedge.models.held_text import HELD_TEXT
    from mtpedge.models.loading import default_model_path

    config = QuantConfig(weights="gguf", quality_report=False)
    out = quantize_bundle(smollm2_float_bundle, tmp_path / "q", config, default_model_path())
    assert read_manifest(out).extras["quantization"]["tensors"] == {"gguf:Q4_1": 210, "gguf:Q8_0": 1}
    float_engine = Engine.load(smollm2_float_bundle)
    ids = float_engine.tokenizer.encode(HELD_TEXT)[:128]
    ref = sequence_logits(float_engine, ids)
    del float_engine
    got = sequence_logits(Engine.load(out), ids)
    assert (ref.argmax(-1) == got.argmax(-1)).mean() >= 0.95

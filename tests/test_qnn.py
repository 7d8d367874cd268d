"""QDQ bundles for the Qualcomm HTP and the QNN execution provider (HTP simulator on x86 Linux).

The simulator tests need the `qnn` extra (onnxruntime-qnn); without it they are skipped, with the reason.
"""

from __future__ import annotations

import gc
import json
import platform

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from mtpedge.export.qdq import QDQ_MASK_VALUE, QdqConfig, activation_encodings, fuse_rms_norms
from mtpedge.export.qdq_bundle import qdq_bundle
from mtpedge.export.quality import sequence_logits
from mtpedge.runtime.bundle import BundleError, read_manifest
from mtpedge.runtime.contract import CACHE_SLOTS, new_key_name, new_value_name, past_key_name, past_value_name
from mtpedge.runtime.engine import Engine

QNN = "QNNExecutionProvider"


@pytest.fixture(scope="module")
def qdq_tiny(tiny_bundle, tmp_path_factory):
    return qdq_bundle(tiny_bundle("llama"), tmp_path_factory.mktemp("qdq") / "bundle")


def assert_htp_close(htp: np.ndarray, cpu: np.ndarray) -> None:
    """The HTP's fixed-point arithmetic is not the CPU's: close (the RMSNorm-as-rsqrt bug gave 0.69), not equal."""
    assert np.corrcoef(htp.ravel(), cpu.ravel())[0, 1] > 0.998
    assert np.abs(htp - cpu).max() < 0.1 * float(np.abs(cpu).max())
    assert (htp.argmax(-1) == cpu.argmax(-1)).mean() >= 0.75


def needs_qnn():
    pytest.importorskip("onnxruntime_qnn", reason="the HTP simulator needs the qnn extra: pip install 'mtpedge[qnn]'")


@pytest.mark.parametrize("arch", ["llama", "qwen3"])
def test_rms_norm_fusion_keeps_the_float_graph(tiny_bundle, arch):
    bundle = tiny_bundle(arch)
    manifest = read_manifest(bundle)
    entry = next(g for g in manifest.graphs if g.width == 1)
    model = onnx.load(str(bundle / entry.file))
    layers = manifest.config.num_layers
    expected = 2 * layers + 1 + (2 * layers if manifest.config.qk_norm else 0)
    assert fuse_rms_norms(model) == expected
    assert not any(n.op_type in ("Pow", "ReduceMean", "Sqrt") for n in model.graph.node)
    rng = np.random.default_rng(0)
    reference = ort.InferenceSession(str(bundle / entry.file), providers=["CPUExecutionProvider"])
    fused = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    feeds = random_feeds(entry, rng, scale=0.5)
    for want, got in zip(reference.run(None, feeds), fused.run(None, feeds), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_qdq_bundle_ties_kv_encodings_and_records_them(qdq_tiny):
    manifest = read_manifest(qdq_tiny)
    assert manifest.mask_value == QDQ_MASK_VALUE and {g.precision for g in manifest.graphs} == {"qdq-a16w8"}
    for graph, encodings in manifest.extras["qdq"]["encodings"].items():
        for layer in range(manifest.config.num_layers):
            assert encodings[past_key_name(layer)] == encodings[new_key_name(layer)], graph
            assert encodings[past_value_name(layer)] == encodings[new_value_name(layer)], graph
        # the bias feeds only the attention core, which the recipe keeps fp16 (QdqConfig.float_attention)
        assert "attention_bias" not in encodings
        assert encodings["logits"]["dtype"] == "uint16"
    quality = manifest.extras["quality"]
    assert quality["perplexity"]["quantized"] > 0 and 0 <= quality["top1_agreement"] <= 1


def test_the_attention_core_stays_float_from_scores_to_probabilities_times_v(qdq_tiny):
    """No QuantizeLinear inside q.K -> bias -> Softmax -> probabilities.V: the HTP runs it in fp16. Leaving only
    the two products float did nothing, since onnxruntime moved a Reshape's Q back onto the product."""
    from mtpedge.export.qdq_float16 import attention_core_nodes

    manifest = read_manifest(qdq_tiny)
    model = onnx.load(str(qdq_tiny / manifest.graphs[0].file))
    core = set(attention_core_nodes(model))
    assert sum(1 for n in model.graph.node if n.op_type == "Softmax") == manifest.config.num_layers
    assert len(core) >= 6 * manifest.config.num_layers
    producer = {out: n for n in model.graph.node for out in n.output}
    for node in model.graph.node:
        if node.name in core and node.op_type in ("Softmax", "Add", "Reshape"):
            assert all(producer[i].op_type != "DequantizeLinear" for i in node.input if i in producer), node.name


def test_every_width_takes_the_widest_graphs_activation_encodings(qdq_tiny):
    """A row must compute the same numbers in a wide verification call as in plain decoding's narrow one."""
    manifest = read_manifest(qdq_tiny)
    by_graph = {g.name: activation_encodings(onnx.load(str(qdq_tiny / g.file))) for g in manifest.graphs}
    widest = max(manifest.graphs, key=lambda g: g.width).name
    assert manifest.extras["qdq"]["encodings_from"] == widest
    for name, encodings in by_graph.items():
        common = encodings.keys() & by_graph[widest].keys()
        assert len(common) > 0.9 * len(encodings), name
        assert {t: encodings[t] for t in common} == {t: by_graph[widest][t] for t in common}, name


def test_smoothing_goes_into_every_width_and_keeps_the_models_answers(tiny_bundle, qdq_tiny, tmp_path):
    """QdqConfig.smooth_alpha: every graph gets the widest graph's factors (its encodings assume them), so each
    width's QDQ logits stay as close to float32 as the unsmoothed bundle's."""
    src = tiny_bundle("llama")
    smoothed = qdq_bundle(src, tmp_path / "smoothed", QdqConfig(smooth_alpha=0.5), quality=False)
    manifest = read_manifest(smoothed)
    assert manifest.extras["qdq"]["smoothed_norms"] == 2 * manifest.config.num_layers + 1
    rng = np.random.default_rng(0)
    for entry in manifest.graphs:
        feeds = random_feeds(entry, rng)
        float_logits, plain, smooth = (
            ort.InferenceSession(str(folder / entry.file), providers=["CPUExecutionProvider"]).run(["logits"], feeds)[0]
            for folder in (src, qdq_tiny, smoothed))
        corr = [np.corrcoef(q.ravel(), float_logits.ravel())[0, 1] for q in (plain, smooth)]
        assert corr[1] > corr[0] - 0.02, entry.name


def random_feeds(entry, rng, scale: float = 0.3) -> dict[str, np.ndarray]:
    """Random activations and cache, every column visible, the rows at cache columns 0 .. N - 1."""
    feeds = {name: rng.normal(0, scale, shape).astype(np.float32) for name, shape in entry.inputs.items()}
    feeds["attention_bias"][:] = 0.0
    feeds[CACHE_SLOTS] = np.arange(entry.width, dtype=np.int64)[None]
    return feeds


def test_qdq_config_refuses_a_huge_mask_value():
    with pytest.raises(ValueError, match="about -100"):
        QdqConfig(mask_value=-1e9)


@pytest.mark.parametrize("alpha", [-0.5, 1.0])
def test_qdq_config_refuses_a_smoothing_strength_outside_0_1(alpha):
    with pytest.raises(ValueError, match=r"smooth_alpha must be in \[0, 1\)"):
        QdqConfig(smooth_alpha=alpha)


def test_htp_simulator_runs_the_whole_graph_and_matches_cpu_qdq(qdq_tiny):
    """CPU fallback disabled: a session exists only if every node runs on the HTP."""
    needs_qnn()
    ids = Engine.load(qdq_tiny).tokenizer.encode("The quick brown fox jumps over the lazy dog.")[:20]
    cpu = sequence_logits(Engine.load(qdq_tiny), ids)
    htp_engine = Engine.load(qdq_tiny, providers=[QNN])
    htp = sequence_logits(htp_engine, ids)
    del htp_engine
    gc.collect()  # the simulator misbehaves with many HTP sessions alive in one process
    assert_htp_close(htp, cpu)


def test_qnn_bundle_compiles_and_runs_with_its_stamps_checked(qdq_tiny, tmp_path):
    needs_qnn()
    from mtpedge.export.qnn_compile import compile_qnn_bundle, soc_target

    out = compile_qnn_bundle(qdq_tiny, tmp_path / "qnn", "sm8750", share_weights=False)
    manifest = read_manifest(out)
    target = manifest.extras["qnn"]
    assert (target["htp_arch"], target["soc_model"]) == (79, 69)
    assert len(target["context_binaries"]) == len(manifest.graphs) and not target["weight_sharing"]
    for entry in manifest.graphs:  # compile_graph refuses partial placement; check the saved files too
        assert {n.op_type for n in onnx.load(str(out / entry.file), load_external_data=False).graph.node} == \
            {"EPContext"}
    ids = Engine.load(qdq_tiny).tokenizer.encode("Numbers like 12, 345 and 6789 appear.")[:12]
    cpu = sequence_logits(Engine.load(qdq_tiny), ids)
    engine = Engine.load(out, providers=[QNN])
    htp = sequence_logits(engine, ids)
    del engine
    gc.collect()
    assert_htp_close(htp, cpu)
    with pytest.raises(BundleError, match="context binaries for Snapdragon 8 Elite"):
        Engine.load(out)
    data = json.loads((out / "manifest.json").read_text())
    data["extras"]["qnn"]["onnxruntime_qnn"] = "0.0.1"
    (out / "manifest.json").write_text(json.dumps(data))
    with pytest.raises(BundleError, match="re-run `mtpedge compile-qnn`"):
        Engine.load(out, providers=[QNN])
    with pytest.raises(ValueError, match="unknown SoC"):
        soc_target("snapdragon-1")


def test_shared_weights_one_binary_every_graph_runs_on_the_htp(qdq_tiny, tmp_path):
    """All widths in one QNN context: one binary, the weights in it once, each graph run on the simulator in
    its compile session (CPU fallback disabled) and close to the CPU QDQ graph."""
    needs_qnn()
    from mtpedge.export.qnn_compile import compile_qnn_bundle

    manifest = read_manifest(qdq_tiny)
    rng = np.random.default_rng(0)
    checked = []

    def run_in_context(i, session):
        entry = manifest.graphs[i]
        feeds = random_feeds(entry, rng)
        cpu = ort.InferenceSession(str(qdq_tiny / entry.file), providers=["CPUExecutionProvider"])
        assert_htp_close(session.run(["logits"], feeds)[0], cpu.run(["logits"], feeds)[0])
        checked.append(entry.name)

    shared = compile_qnn_bundle(qdq_tiny, tmp_path / "shared", "sm8750", on_compiled=run_in_context)
    assert checked == [g.name for g in manifest.graphs]
    target = read_manifest(shared).extras["qnn"]
    assert target["weight_sharing"] and len(target["context_binaries"]) == 1
    for entry in read_manifest(shared).graphs:
        (node,) = onnx.load(str(shared / entry.file), load_external_data=False).graph.node
        assert node.op_type == "EPContext"
        assert onnx.helper.get_attribute_value(node.attribute[[a.name for a in node.attribute].index(
            "ep_cache_context")]).decode() == target["context_binaries"][0]
    separate = read_manifest(compile_qnn_bundle(qdq_tiny, tmp_path / "separate", "sm8750", share_weights=False))
    weights = (qdq_tiny / "weights.data").stat().st_size
    # one copy of the weights instead of one per graph (the rest of each binary is the graph itself)
    assert target["context_bytes"] < separate.extras["qnn"]["context_bytes"] - (len(manifest.graphs) - 1) * weights
    if platform.machine().lower() not in ("aarch64", "arm64"):
        with pytest.raises(BundleError, match="--no-share-weights"):
            Engine.load(shared, providers=[QNN])


def test_generate_on_the_htp_with_a_drafter_equals_plain_decoding(qdq_tiny, tmp_path, capsys):
    """`mtpedge generate --device qnn`: the hybrid drafter's tokens are plain decoding's, on the same QNN graphs,
    for this tiny model and these prompts. The HTP's wide calls do not compute a root row bit for bit as its
    width-1 call (SmolLM2: benchmarks/results/quant/smollm2-width-invariance-htp.log), so this pins that the
    drafted loop runs and verifies on the HTP, not that drafting there is lossless (default_drafter: none)."""
    needs_qnn()
    from mtpedge.export.qnn_compile import compile_qnn_bundle
    from mtpedge.main import main

    out = compile_qnn_bundle(qdq_tiny, tmp_path / "qnn", "sm8750", share_weights=False)

    def tokens(prompt, drafter):
        assert main(["generate", prompt, "--bundle", str(out), "--device", "qnn", "--json", "--max-new-tokens", "12",
                     "--drafter", drafter]) == 0
        gc.collect()
        return json.loads(capsys.readouterr().out.strip().splitlines()[-1])

    for prompt in ("Explain how a bicycle works.", "Write a short story about a storm.", "the the the the"):
        plain, drafted = tokens(prompt, "none"), tokens(prompt, "hybrid")
        assert drafted["token_ids"] == plain["token_ids"] and len(plain["token_ids"]) == 12
        assert drafted["decode_calls"] <= plain["decode_calls"]


def test_compiling_a_float_bundle_is_refused(tiny_bundle, tmp_path):
    needs_qnn()
    from mtpedge.export.qnn_compile import compile_qnn_bundle

    with pytest.raises(ValueError, match="not a QDQ bundle"):
        compile_qnn_bundle(tiny_bundle("llama"), tmp_path / "x", "snapdragon-8-elite")


def test_one_decode_graph_drafts_by_default_on_the_htp_and_equals_plain_decoding(tiny_one_width_bundle, qdq_tiny,
                                                                                tmp_path, capsys):
    """A QDQ bundle with one decode graph (the default of `--precision qdq`): plain decoding runs the graph the
    drafts run, so on the HTP, whose graphs of two widths compute a row differently, a drafted chain's rows are
    still plain decoding's (the row probe, run on the simulator, finds them bit for bit equal), and `generate`
    without --drafter drafts (lookup) and keeps plain decoding's tokens. With several decode graphs the default
    stays plain decoding."""
    needs_qnn()
    from mtpedge.export.qnn_compile import compile_qnn_bundle
    from mtpedge.main import main
    from mtpedge.runtime.drafters import DEFAULT_DRAFTER, NONE, default_drafter
    from mtpedge.runtime.row_probe import probe_rows

    assert default_drafter(read_manifest(qdq_tiny)) == NONE
    qdq = qdq_bundle(tiny_one_width_bundle, tmp_path / "qdq")
    out = compile_qnn_bundle(qdq, tmp_path / "qnn", "sm8750", share_weights=False)
    assert default_drafter(read_manifest(qdq)) == default_drafter(read_manifest(out)) == DEFAULT_DRAFTER
    engine = Engine.load(out, providers=[QNN])
    probe = probe_rows(engine)
    del engine
    gc.collect()
    assert probe.invariant and set(probe.max_diff) == {4}

    def tokens(prompt, *drafter):
        assert main(["generate", prompt, "--bundle", str(out), "--device", "qnn", "--json", "--max-new-tokens", "16",
                     *drafter]) == 0
        gc.collect()
        return json.loads(capsys.readouterr().out.strip().splitlines()[-1])

    saved = 0
    for prompt in ("Explain how a bicycle works.", "the the the the", "Numbers like 12, 345 and 6789 appear."):
        plain, default = tokens(prompt, "--drafter", "none"), tokens(prompt)
        assert default["drafter"] == DEFAULT_DRAFTER
        assert default["token_ids"] == plain["token_ids"] and len(plain["token_ids"]) == 16
        saved += plain["decode_calls"] - default["decode_calls"]
    assert saved > 0  # drafts were accepted: the verifier read the HTP's chain rows, not only the roots

"""Where the HTP's QDQ answers part from the CPU's: the residual stream after every layer, three ways.

    python benchmarks/htp_layer_drift.py FLOAT_BUNDLE QDQ_BUNDLE [--tokens 64] [--isolate LAYER,...]
        [--blocks LAYER,...] [--ops KIND,... --blocks LAYER,...] [--out FILE]

One prefill call of the held text's first tokens (feeds built by the float bundle's own engine) runs through
the float32 graph, the QDQ graph on the CPU's emulation and the same QDQ graph on the HTP simulator (QNN EP,
CPU fallback disabled), with the residual stream after each attention and each MLP block added as graph outputs
(the recipe keeps that stream float: fp16 on the HTP). Per tensor it prints the relative error
||a - b|| / ||b|| of CPU-QDQ and HTP against float32 and of HTP against CPU-QDQ, then the logits' top-1
agreement: the layer where HTP-vs-CPU grows is where the HTP computes the quantized graph otherwise than its
emulation. The simulator takes a minute or two to prepare the graph and seconds to run it.

--isolate L runs layer L's MLP down projection alone, as the QDQ graph keeps it where the recipe left it float
(an outlier layer: fp16 on the HTP), on the float32 graph's own input to it: HTP vs an exact float64 product,
against float16-rounded inputs summed exactly, over the rows with and without the outlier.

--blocks L runs layer L's attention block (stream in -> stream after attention) and MLP block (-> stream after
the MLP) of the QDQ graph alone, on the HTP and on the CPU, both fed the CPU emulation's own input to the block:
the error each block adds on the HTP by itself (||htp - cpu|| / ||cpu||, and on the rows without the first
token, whose massive activations dominate the norm). With --ops (e.g. Softmax,Sigmoid,MatMul) it runs each
quantized node of those kinds in the layers alone instead, from the float tensors its input QuantizeLinears read
to the float output of its own output's DequantizeLinear, so that the HTP runs it quantized as in the whole graph.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import numpy as np
import onnx
import onnx.utils
import onnxruntime as ort

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from mtpedge.bench.report import emit_result  # noqa: E402
from mtpedge.export.quality import HELD_TEXT  # noqa: E402
from mtpedge.runtime.bundle import read_manifest  # noqa: E402
from mtpedge.runtime.engine import Engine  # noqa: E402
from mtpedge.runtime.qnn import add_qnn_provider  # noqa: E402

STREAM = re.compile(r"^/layers\.(\d+)/Add(_1)?_output_0$")


def widest_prefill(bundle: str) -> Path:
    manifest = read_manifest(bundle)
    entry = max((g for g in manifest.graphs if g.kind == "prefill"), key=lambda g: (g.width, g.context))
    return Path(bundle) / entry.file


def stream_names(model: onnx.ModelProto) -> list[str]:
    names = [o for n in model.graph.node for o in n.output if STREAM.match(o)]
    return sorted(names, key=lambda s: (int(STREAM.match(s).group(1)), s))


def with_outputs(path: Path, names: list[str]) -> bytes:
    """The graph at `path` with `names` (float tensors) as extra outputs, weights read from its folder."""
    model = onnx.load(str(path))
    known = {o.name for o in model.graph.output}
    model.graph.output.extend(onnx.helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, None)
                              for n in names if n not in known)
    return model.SerializeToString()


def recorded_feeds(float_bundle: str, tokens: int) -> dict[str, np.ndarray]:
    """The feeds of the float engine's first prefill call over the held text."""
    engine = Engine.load(float_bundle)
    captured = {}
    original = engine.graphs.run

    def spy(entry, feeds, n_real):
        captured.setdefault("feeds", {k: np.array(v) for k, v in feeds.items()})
        return original(entry, feeds, n_real)

    engine.graphs.run = spy
    ids = engine.tokenizer.encode(HELD_TEXT)[:tokens]
    for _ in engine.prefill_chunks(ids):
        break
    return captured["feeds"]


def session_for(model: bytes, qnn_manifest=None) -> ort.InferenceSession:
    """One thread on the CPU, or the HTP simulator (CPU fallback disabled) when a QNN manifest is given."""
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    if qnn_manifest is None:
        return ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])
    add_qnn_provider(opts, qnn_manifest)
    return ort.InferenceSession(model, opts)


def first_output(model: bytes, feeds: dict, qnn_manifest=None) -> np.ndarray:
    return np.asarray(session_for(model, qnn_manifest).run(None, feeds)[0], np.float64)


def run(model: bytes, feeds: dict, names: list[str], qnn_manifest=None) -> dict[str, np.ndarray]:
    session = session_for(model, qnn_manifest)
    wanted = {i.name for i in session.get_inputs()}
    out = session.run(["logits", *names], {k: v for k, v in feeds.items() if k in wanted})
    return dict(zip(["logits", *names], (np.asarray(o, np.float64) for o in out), strict=True))


def rel(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))


def isolated_down_proj(layer: int, float_path: Path, qdq_bundle: str, feeds: dict) -> dict:
    """Layer `layer`'s float down projection of the QDQ graph alone on the HTP (see the module docstring)."""
    x_name = f"/layers.{layer}/mlp/Mul_1_output_0"
    x = run(with_outputs(float_path, [x_name]), feeds, [x_name])[x_name].astype(np.float32)
    qdq = onnx.load(str(widest_prefill(qdq_bundle)))
    node = next(n for n in qdq.graph.node if n.name == f"/layers.{layer}/mlp/down_proj/MatMul")
    weights = next((t for t in qdq.graph.initializer if t.name == node.input[1]), None)
    if weights is None:
        raise SystemExit(f"layer {layer}'s down projection is quantized in this QDQ graph, not float: "
                         "nothing to isolate")
    w = numpy_helper.to_array(weights).astype(np.float32)
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "down_proj",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9).SerializeToString()
    htp = first_output(model, {"x": x}, read_manifest(qdq_bundle))
    exact = x.astype(np.float64) @ w.astype(np.float64)
    half = x.astype(np.float16).astype(np.float64) @ w.astype(np.float16).astype(np.float64)
    outlier_rows = np.abs(x[0]).max(-1) > 50 * np.percentile(np.abs(x), 99.9)
    parts = {"all": slice(None), "outlier_rows": outlier_rows, "other_rows": ~outlier_rows}
    return {"layer": layer, "max_abs_input": float(np.abs(x).max()),
            "outlier_rows": np.flatnonzero(outlier_rows).tolist(),
            **{f"htp_{k}": rel(htp[0, v], exact[0, v]) for k, v in parts.items()},
            **{f"fp16_inputs_{k}": rel(half[0, v], exact[0, v]) for k, v in parts.items()}}


def isolated_blocks(layers: list[int], qdq_path: Path, qnn_manifest, feeds: dict, cpu: dict) -> list[dict]:
    """Each layer's attention and MLP block of the QDQ graph alone, HTP vs CPU on the CPU's own block inputs."""
    model = onnx.load(str(qdq_path))
    extractor = onnx.utils.Extractor(model)
    graph_inputs = [i.name for i in model.graph.input]
    found = []
    for layer in layers:
        before = "inputs_embeds" if layer == 0 else f"/layers.{layer - 1}/Add_1_output_0"
        spans = {"attention": (before, f"/layers.{layer}/Add_output_0"),
                 "mlp": (f"/layers.{layer}/Add_output_0", f"/layers.{layer}/Add_1_output_0")}
        for block, (source, target) in spans.items():
            sub = extractor.extract_model([source, *(n for n in graph_inputs if n != source)], [target])
            used = {name for node in sub.graph.node for name in node.input}
            kept = [i for i in sub.graph.input if i.name in used]
            del sub.graph.input[:]
            sub.graph.input.extend(kept)
            block_feeds = {i.name: cpu[source].astype(np.float32) if i.name == source else feeds[i.name]
                           for i in kept}
            data = sub.SerializeToString()
            on_cpu, on_htp = first_output(data, block_feeds), first_output(data, block_feeds, qnn_manifest)
            found.append({"layer": layer, "block": block, "htp_vs_cpu": rel(on_htp, on_cpu),
                          "htp_vs_cpu_after_first_token": rel(on_htp[:, 1:], on_cpu[:, 1:])})
            print(f"layer {layer} {block}: htp/cpu {found[-1]['htp_vs_cpu']:.2e} "
                  f"(rows 1-: {found[-1]['htp_vs_cpu_after_first_token']:.2e})", file=sys.stderr, flush=True)
    return found


def quantized_spans(model: onnx.ModelProto, layer: int, kinds: list[str]) -> list[tuple[str, list[str], str]]:
    """(node name, float inputs, float output) of each node of `kinds` in `layer` quantized Q -> DQ -> node -> Q -> DQ
    on every activation input (nodes whose inputs come otherwise, e.g. through a Transpose, are left out)."""
    producer = {o: n for n in model.graph.node for o in n.output}
    readers: dict[str, list[onnx.NodeProto]] = {}
    for node in model.graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)
    spans = []
    for node in model.graph.node:
        if node.op_type not in kinds or not node.name.startswith(f"/layers.{layer}/"):
            continue
        sources, complete = [], True
        for name in node.input:
            dq = producer.get(name)
            if dq is not None and dq.op_type == "DequantizeLinear" and dq.input[0] not in producer:
                continue  # a quantized weight: its initializer comes along
            q = producer.get(dq.input[0]) if dq is not None and dq.op_type == "DequantizeLinear" else None
            if q is not None and q.op_type == "QuantizeLinear":
                sources.append(q.input[0])
            elif name in producer:
                complete = False
        quantize = [r for r in readers.get(node.output[0], []) if r.op_type == "QuantizeLinear"]
        dequantize = [r for q in quantize for r in readers.get(q.output[0], []) if r.op_type == "DequantizeLinear"]
        if sources and complete and dequantize:
            spans.append((node.name, sources, dequantize[0].output[0]))
    return spans


def isolated_ops(layers: list[int], kinds: list[str], qdq_path: Path, qnn_manifest, feeds: dict) -> list[dict]:
    """Each quantized node of `kinds` alone, HTP vs CPU, fed the CPU emulation's own float inputs."""
    model = onnx.load(str(qdq_path))
    spans = [span for layer in layers for span in quantized_spans(model, layer, kinds)]
    sources = sorted({name for _, inputs, _ in spans for name in inputs})
    values = run(with_outputs(qdq_path, sources), feeds, sources)
    # shape inference stops at the contrib norm nodes, and the extractor needs a type for every cut it makes
    known = {v.name for v in model.graph.value_info}
    model.graph.value_info.extend(helper.make_tensor_value_info(name, TensorProto.FLOAT, None)
                                  for name in sorted({*sources, *(t for _, _, t in spans)} - known))
    extractor = onnx.utils.Extractor(model)
    found = []
    for name, inputs, target in spans:
        sub = extractor.extract_model(inputs, [target]).SerializeToString()
        span_feeds = {i: values[i].astype(np.float32) for i in inputs}
        on_cpu, on_htp = first_output(sub, span_feeds), first_output(sub, span_feeds, qnn_manifest)
        found.append({"node": name, "htp_vs_cpu": rel(on_htp, on_cpu),
                      "max_abs_difference": float(np.abs(on_htp - on_cpu).max())})
        print(f"{name}: htp/cpu {found[-1]['htp_vs_cpu']:.2e}, max |diff| {found[-1]['max_abs_difference']:.3g}",
              file=sys.stderr, flush=True)
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("float_bundle")
    parser.add_argument("qdq_bundle")
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--isolate", help="comma-separated layers whose float down projection to run alone")
    parser.add_argument("--blocks", help="comma-separated layers whose attention and MLP blocks to run alone")
    parser.add_argument("--ops", help="with --blocks: run these quantized node kinds of the layers alone instead")
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    feeds = recorded_feeds(args.float_bundle, args.tokens)
    n_real = min(args.tokens, feeds["inputs_embeds"].shape[1])
    float_path, qdq_path = widest_prefill(args.float_bundle), widest_prefill(args.qdq_bundle)
    if args.isolate:
        layers = [int(layer) for layer in args.isolate.split(",")]
        found = [isolated_down_proj(layer, float_path, args.qdq_bundle, feeds) for layer in layers]
        emit_result({"float_bundle": args.float_bundle, "qdq_bundle": args.qdq_bundle, "isolated": found}, args.out)
        return 0
    if args.ops:
        layers = [int(layer) for layer in (args.blocks or "0").split(",")]
        found = isolated_ops(layers, args.ops.split(","), qdq_path, read_manifest(args.qdq_bundle), feeds)
        emit_result({"float_bundle": args.float_bundle, "qdq_bundle": args.qdq_bundle, "ops": found}, args.out)
        return 0
    qdq_names = stream_names(onnx.load(str(qdq_path), load_external_data=False))
    names = [n for n in stream_names(onnx.load(str(float_path), load_external_data=False)) if n in qdq_names]
    print(f"{len(names)} stream tensors; running float32, CPU QDQ, HTP QDQ", file=sys.stderr, flush=True)
    qdq_model = with_outputs(qdq_path, names)
    cpu = run(qdq_model, feeds, names)
    if args.blocks:
        layers = [int(layer) for layer in args.blocks.split(",")]
        cpu = {**cpu, "inputs_embeds": feeds["inputs_embeds"].astype(np.float64)}
        found = isolated_blocks(layers, qdq_path, read_manifest(args.qdq_bundle), feeds, cpu)
        emit_result({"float_bundle": args.float_bundle, "qdq_bundle": args.qdq_bundle, "blocks": found}, args.out)
        return 0
    ref = run(with_outputs(float_path, names), feeds, names)
    htp = run(qdq_model, feeds, names, qnn_manifest=read_manifest(args.qdq_bundle))
    rows = []
    for name in names:
        a, c, h = (x[name][:, :n_real] for x in (ref, cpu, htp))
        rows.append({"tensor": name, "cpu_vs_f32": rel(c, a), "htp_vs_f32": rel(h, a), "htp_vs_cpu": rel(h, c)})
        print(f"{name:32s} cpu/f32 {rows[-1]['cpu_vs_f32']:.2e}  htp/f32 {rows[-1]['htp_vs_f32']:.2e}  "
              f"htp/cpu {rows[-1]['htp_vs_cpu']:.2e}")
    top1 = {k: x["logits"][0, :n_real].argmax(-1) for k, x in (("f32", ref), ("cpu", cpu), ("htp", htp))}
    agreement = {"cpu_vs_f32": float((top1["cpu"] == top1["f32"]).mean()),
                 "htp_vs_f32": float((top1["htp"] == top1["f32"]).mean()),
                 "htp_vs_cpu": float((top1["htp"] == top1["cpu"]).mean())}
    print(f"top-1 agreement over {n_real} rows: {agreement}")
    emit_result({"float_bundle": args.float_bundle, "qdq_bundle": args.qdq_bundle, "rows": n_real,
                 "top1": agreement, "stream": rows}, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())

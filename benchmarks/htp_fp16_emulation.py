"""Is it the HTP's float16 that costs a QDQ bundle its answers? The CPU's QDQ emulation with fp16 rounding added.

    python benchmarks/htp_fp16_emulation.py QDQ_BUNDLE OUT_BUNDLE [--only add|mul|matmul|input]
    python benchmarks/qdq_quality.py FLOAT_BUNDLE OUT_BUNDLE --out FILE.json

The QNN EP runs the nodes a QDQ graph leaves unquantized (the recipe's fp16 residual stream, the outlier nodes)
in float16 on the HTP, where the CPU's emulation runs them in float32; on SmolLM2 the HTP simulator agrees with
float32 on fewer top-1 tokens than the CPU emulation of the same graphs (benchmarks/results/quant/). This writes
a copy of a QDQ bundle whose float nodes see and produce values rounded to float16 (a Cast to float16 and back
on every float input and output of a float node: float16 storage, float32 arithmetic inside each node), so that
qdq_quality.py measures what float16 storage alone costs on the CPU. `--only` rounds just the tensors of one
kind of float node (or only the graph's float inputs), to find which part of the stream is sensitive.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

import onnx
from onnx import TensorProto, helper

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from mtpedge.runtime.bundle import MANIFEST, file_record  # noqa: E402

QDQ_OPS = ("QuantizeLinear", "DequantizeLinear")
KINDS = {"add": "Add", "mul": "Mul", "matmul": "MatMul"}


def float_tensors(model: onnx.ModelProto) -> set[str]:
    inferred = onnx.shape_inference.infer_shapes(model)
    infos = list(inferred.graph.value_info) + list(inferred.graph.input) + list(inferred.graph.output)
    floats = {v.name for v in infos if v.type.tensor_type.elem_type == TensorProto.FLOAT}
    floats |= {t.name for t in model.graph.initializer if t.data_type == TensorProto.FLOAT}
    return floats


def round_trip_names(model: onnx.ModelProto, only: str | None) -> set[str]:
    """Float inputs and outputs of the nodes whose outputs stay float (no QuantizeLinear reads them)."""
    graph, floats = model.graph, float_tensors(model)
    consumers: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    initializers = {t.name for t in graph.initializer}
    graph_inputs = {i.name for i in graph.input if i.name in floats}
    if only == "input":
        return graph_inputs
    names: set[str] = set()
    for node in graph.node:
        if node.op_type in QDQ_OPS or node.op_type == "Constant":
            continue
        if only is not None and node.op_type != KINDS[only]:
            continue
        outputs = [o for o in node.output if o in floats]
        if not outputs or any(c.op_type == "QuantizeLinear" for o in outputs for c in consumers.get(o, [])):
            continue
        names |= {name for name in list(node.input) + outputs if name in floats and name not in initializers}
    graph_outputs = {o.name for o in graph.output}
    return names - graph_outputs


def add_round_trips(model: onnx.ModelProto, names: set[str]) -> int:
    """Insert Cast(float16) -> Cast(float) after each tensor of `names` and point its readers at the result."""
    graph = model.graph
    produced_at = {o: i for i, node in enumerate(graph.node) for o in node.output}
    renamed = {name: f"{name}.fp16_round" for name in names}
    for node in graph.node:
        for i, name in enumerate(node.input):
            if name in renamed:
                node.input[i] = renamed[name]
    inserts: dict[int, list[onnx.NodeProto]] = {}
    for name in sorted(names):
        half = f"{name}.fp16"
        casts = [helper.make_node("Cast", [name], [half], to=TensorProto.FLOAT16, name=f"{half}.cast"),
                 helper.make_node("Cast", [half], [renamed[name]], to=TensorProto.FLOAT, name=f"{half}.back")]
        inserts.setdefault(produced_at.get(name, -1), []).extend(casts)
    nodes = list(inserts.get(-1, []))  # graph inputs: their round trips come first
    for i, node in enumerate(graph.node):
        nodes.append(node)
        nodes += inserts.get(i, [])
    del graph.node[:]
    graph.node.extend(nodes)
    return len(names)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("qdq_bundle")
    parser.add_argument("out_bundle")
    parser.add_argument("--only", choices=[*KINDS, "input"])
    args = parser.parse_args(argv)
    source, out = Path(args.qdq_bundle), Path(args.out_bundle)
    if out.exists():
        sys.exit(f"{out} exists: choose a new folder (nothing was written)")
    out.mkdir(parents=True)
    for path in sorted(source.iterdir()):
        if path.suffix == ".onnx":
            model = onnx.load(str(path), load_external_data=False)
            count = add_round_trips(model, round_trip_names(model, args.only))
            onnx.save(model, str(out / path.name))
            print(f"{path.name}: {count} float tensors rounded to float16", flush=True)
        elif path.name != MANIFEST:  # copied: a bundle refuses symlinks out of it, onnx a hard-linked weights file
            shutil.copy2(path, out / path.name)
    manifest = json.loads((source / MANIFEST).read_text())
    for name in manifest["files"]:  # the rewritten graphs' sizes and digests
        manifest["files"][name] = file_record(out / name)
    (out / MANIFEST).write_text(json.dumps(manifest, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

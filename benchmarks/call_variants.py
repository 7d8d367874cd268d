"""What fusing or removing parts of a decode call would save: variants of one graph, timed call by call, interleaved.

Variants of the bundle's decode graph (width 1, the smallest context bucket by default):
  exported      as the bundle has it
  no-minima     the Q4_1 block-minimum correction dropped (wrong outputs): the most any cheaper correction saves
  sums-in-nbits the block sums of x as extra output rows of the weights' own MatMulNBits (indicator codes,
                scale 1), instead of Reshape + ReduceSum
  attention-op  each layer's q.K, bias, Softmax, probabilities.V and their reshapes as one ONNX Attention
                (opset 23; onnxruntime's CPU kernel)
  bias-in-nbits (width 1 only) the block-minimum correction as MatMulNBits' bias input: the block sums and
                their MatMul one-dimensional, so the Add after each weight product goes
  f16-minima    the Q4_1 block minima stored as float16 (the GGUF's own precision, so exact) and cast to
                float32 at run time: they are ~11% of the bytes a call reads. Each float16 table is also a
                graph input (an overridable initializer), so onnxruntime does not fold the Cast back at load
  int8-rows     every weight product on onnxruntime's integer GEMM (export/integer_gemm.py): the exact weights
                re-quantized to int8 per column, activations to uint8 per row
  no-attention  each layer's o_proj reads q_proj's output: the query side, q.K, Softmax, probabilities.V, the
                cache scatter and every reshape between them dropped (wrong outputs): the most any fused
                attention kernel saves
Each variant's first-layer attention output and o_proj output are compared with the exported graph's on the
same feeds (random caches, so the logits themselves are not comparable after 30 layers).

    python benchmarks/call_variants.py [BUNDLE] [--graph decode_ar1_cl256.onnx] [--rounds 150] [--threads 1]
        [--variants no-minima,f16-minima]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from mtpedge.export.integer_gemm import to_integer_gemm  # noqa: E402
from mtpedge.runtime.graphs import SESSION_DEFAULTS  # noqa: E402

WRONG_OUTPUTS = ("no-minima", "no-attention")  # bounds, not candidates: their outputs are not compared
PROBES = ["/layers.0/self_attn/Reshape_8_output_0", "/layers.0/self_attn/o_proj/MatMul_output_0"]


def no_minima(model: onnx.ModelProto) -> None:
    nodes = []
    for node in model.graph.node:
        if node.name.endswith(".add_minima"):
            nodes.append(helper.make_node("Identity", [node.input[0]], list(node.output), name=node.name))
        elif not (node.name.endswith(".minima") or ".blocksum" in node.name):
            nodes.append(node)
    _set_nodes(model, nodes)


def sums_in_nbits(model: onnx.ModelProto) -> None:
    inits = {t.name: t for t in model.graph.initializer}
    producer = {out: n for n in model.graph.node for out in n.output}
    adds = {i: n for n in model.graph.node if n.op_type == "Add" for i in n.input}
    replaced, dropped = {}, set()
    for node in [n for n in model.graph.node if n.op_type == "MatMul" and n.name.endswith(".minima")]:
        sums, offsets = node.input
        reduce = producer[sums]
        blocks_out = adds[node.output[0]].input[0]
        nbits = producer[blocks_out]
        attrs = {a.name: helper.get_attribute_value(a) for a in nbits.attribute}
        k, n, block = attrs["K"], attrs["N"], attrs["block_size"]
        n_sums = numpy_helper.to_array(inits[offsets]).shape[0]
        codes = np.full((n_sums, k), 8, np.uint8)  # code 8 = 0, code 9 = 1 at scale 1
        for b in range(n_sums):
            codes[b, b * (k // n_sums):(b + 1) * (k // n_sums)] = 9
        codes = codes.reshape(n_sums, k // block, block)
        packed = codes[..., 0::2] | (codes[..., 1::2] << 4)
        weights = numpy_helper.to_array(inits[nbits.input[1]]).reshape(n, k // block, block // 2)
        scales = numpy_helper.to_array(inits[nbits.input[2]]).reshape(-1)
        names = [nbits.input[1] + ".sums", nbits.input[2] + ".sums", nbits.input[1] + ".sums_split"]
        model.graph.initializer.extend([
            numpy_helper.from_array(np.concatenate([weights, packed]), names[0]),
            numpy_helper.from_array(np.concatenate([scales, np.ones(n_sums * (k // block), np.float32)]), names[1]),
            numpy_helper.from_array(np.array([n, n_sums], np.int64), names[2])])
        wide = blocks_out + ".with_sums"
        replaced[nbits.name] = [
            helper.make_node("MatMulNBits", [nbits.input[0], names[0], names[1]], [wide], name=nbits.name,
                             domain="com.microsoft", K=k, N=n + n_sums, bits=4, block_size=block,
                             accuracy_level=attrs["accuracy_level"]),
            helper.make_node("Split", [wide, names[2]], [blocks_out, sums], name=wide + ".split", axis=-1)]
        dropped |= {reduce.name, producer[reduce.input[0]].name}
    _splice(model, replaced, dropped)


def attention_op(model: onnx.ModelProto) -> None:
    core = ["Reshape_3", "Mul_8", "Transpose_3", "MatMul", "Reshape_5", "Add_2", "Softmax", "Reshape_6", "MatMul_1"]
    by_name = {n.name: n for n in model.graph.node}
    replaced, dropped = {}, set()
    for layer in range(sum(1 for n in model.graph.node if n.op_type == "Softmax")):
        prefix = f"/layers.{layer}/self_attn/"
        scale = numpy_helper.to_array(by_name[by_name[prefix + "Mul_8"].input[1].removesuffix("_output_0")]
                                      .attribute[0].t)
        last = by_name[prefix + "Reshape_7"]
        replaced[last.name] = [helper.make_node(
            "Attention", [by_name[prefix + "Concat.rotary"].output[0], f"present_key_{layer}",
                          f"present_value_{layer}", "attention_bias"], list(last.output), name=prefix + "attention",
            scale=float(scale))]
        dropped |= {prefix + name for name in core}
    _splice(model, replaced, dropped)
    for opset in model.opset_import:
        if opset.domain in ("", "ai.onnx"):
            opset.version = 23
    model.ir_version = max(model.ir_version, 10)


def bias_in_nbits(model: onnx.ModelProto) -> None:
    inits = {t.name: t for t in model.graph.initializer}
    producer = {out: n for n in model.graph.node for out in n.output}
    adds = {i: n for n in model.graph.node if n.op_type == "Add" for i in n.input}
    replaced, dropped = {}, set()
    for node in [n for n in model.graph.node if n.op_type == "MatMul" and n.name.endswith(".minima")]:
        sums, offsets = node.input
        reduce = producer[sums]
        reshape = producer[reduce.input[0]]
        add = adds[node.output[0]]
        nbits = producer[add.input[0]]
        n_sums = numpy_helper.to_array(inits[offsets]).shape[0]
        shape = f"{reshape.name}.two_dims"
        model.graph.initializer.append(numpy_helper.from_array(np.array([n_sums, -1], np.int64), shape))
        replaced[reshape.name] = [helper.make_node("Reshape", [reshape.input[0], shape], list(reshape.output),
                                                   name=reshape.name)]
        replaced[nbits.name] = [helper.make_node(
            "MatMulNBits", list(nbits.input[:3]) + ["", "", node.output[0]], list(add.output), name=nbits.name,
            domain="com.microsoft", **{a.name: helper.get_attribute_value(a) for a in nbits.attribute})]
        dropped.add(add.name)
    # the minima MatMul must run before the weight product that now reads it
    order = []
    for n in model.graph.node:
        if n.name in replaced and n.op_type == "MatMulNBits":
            continue
        order.append(n)
        if n.op_type == "MatMul" and n.name.endswith(".minima"):
            order.append(producer[adds[n.output[0]].input[0]])
    del model.graph.node[:]
    model.graph.node.extend(order)
    _splice(model, replaced, dropped)


def f16_minima(model: onnx.ModelProto) -> None:
    inits = {t.name: t for t in model.graph.initializer}
    replaced = {}
    for node in [n for n in model.graph.node if n.op_type == "MatMul" and n.name.endswith(".minima")]:
        sums, offsets = node.input
        table = numpy_helper.to_array(inits[offsets])
        half = table.astype(np.float16)
        name = offsets + ".f16"
        model.graph.initializer.append(numpy_helper.from_array(half, name))
        model.graph.input.append(helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT16, list(half.shape)))
        replaced[node.name] = [helper.make_node("Cast", [name], [name + ".f32"], name=node.name + ".cast", to=1),
                               helper.make_node("MatMul", [sums, name + ".f32"], list(node.output), name=node.name)]
    _splice(model, replaced, set())


def no_attention(model: onnx.ModelProto) -> None:
    replaced = {}
    for node in model.graph.node:
        if node.name.endswith("/self_attn/Reshape_8"):
            prefix = node.name.removesuffix("Reshape_8")
            replaced[node.name] = [helper.make_node("Identity", [prefix + "q_proj/MatMul_output_0"],
                                                    list(node.output), name=node.name)]
    _splice(model, replaced, set())
    _drop_dead(model)


def _drop_dead(model: onnx.ModelProto) -> None:
    """Leave out every node whose outputs no graph output needs."""
    needed = {o.name for o in model.graph.output}
    kept = []
    for node in reversed(model.graph.node):
        if any(out in needed for out in node.output):
            kept.append(node)
            needed |= set(node.input)
    _set_nodes(model, kept[::-1])


def _splice(model: onnx.ModelProto, replaced: dict[str, list[onnx.NodeProto]], dropped: set[str]) -> None:
    """Put each `replaced` node's new nodes in its place and leave out the `dropped` ones."""
    nodes = []
    for node in model.graph.node:
        nodes += replaced.get(node.name, [] if node.name in dropped else [node])
    _set_nodes(model, nodes)


def _set_nodes(model: onnx.ModelProto, nodes: list[onnx.NodeProto]) -> None:
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    used = {name for node in nodes for name in node.input}
    kept = [t for t in model.graph.initializer if t.name in used]
    del model.graph.initializer[:]
    model.graph.initializer.extend(kept)


def session(path: Path, threads: int, probes: bool):
    import onnxruntime as ort

    model = onnx.load(str(path))
    if probes:
        model.graph.output.extend(helper.make_tensor_value_info(p, onnx.TensorProto.FLOAT, None) for p in PROBES)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads, opts.inter_op_num_threads = threads, 1
    opts.log_severity_level = 3
    for key, value in SESSION_DEFAULTS.items():
        opts.add_session_config_entry(key, value)
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])


def feeds_for(sess, filled: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    feeds = {}
    for spec in sess.get_inputs():
        if spec.name == "attention_bias":
            feeds[spec.name] = np.where(np.arange(spec.shape[-1]) <= filled, 0.0, -1e9).astype(np.float32) \
                .reshape(1, 1, 1, -1).repeat(spec.shape[2], 2)
        elif spec.name == "cache_slots":
            feeds[spec.name] = np.full(spec.shape, filled, np.int64)
        else:
            feeds[spec.name] = rng.standard_normal(spec.shape).astype(np.float32)
    return feeds


def main() -> None:
    from mtpedge.bundles import ensure_bundle

    parser = argparse.ArgumentParser()
    parser.add_argument("bundle", nargs="?")
    parser.add_argument("--graph", default="decode_ar1_cl256.onnx")
    parser.add_argument("--rounds", type=int, default=150)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--filled", type=int, default=100)
    parser.add_argument("--variants", help="comma-separated names to time beside `exported` (default: all)")
    args = parser.parse_args()
    folder = Path(args.bundle) if args.bundle else ensure_bundle(None, None, 1024)
    exported = onnx.load(str(folder / args.graph))
    work = Path(tempfile.mkdtemp(prefix="call-variants-"))
    paths = {}
    variants = [("exported", None), ("no-minima", no_minima), ("sums-in-nbits", sums_in_nbits),
                ("attention-op", attention_op), ("bias-in-nbits", bias_in_nbits), ("no-attention", no_attention),
                ("f16-minima", f16_minima), ("int8-rows", to_integer_gemm)]
    if "_ar1_" not in args.graph:
        variants.remove(("bias-in-nbits", bias_in_nbits))
    if args.variants:
        chosen = {"exported", *args.variants.split(",")}
        variants = [(name, change) for name, change in variants if name in chosen]
    for name, change in variants:
        model = onnx.ModelProto()
        model.CopyFrom(exported)
        if change:
            change(model)
        paths[name] = work / f"{name}.onnx"
        onnx.save(model, str(paths[name]))
    print(f"{folder.name}/{args.graph}, {args.threads} thread(s), {args.filled} positions filled, "
          f"load average {os.getloadavg()[0]:.2f}", flush=True)
    checks = {name: session(path, args.threads, probes=True) for name, path in paths.items()
              if name not in WRONG_OUTPUTS}
    feeds = feeds_for(checks["exported"], args.filled)
    reference = checks["exported"].run(PROBES, feeds)
    for name, sess in checks.items():
        got = sess.run(PROBES, feeds)
        diffs = ", ".join(f"{p.split('/')[-1]} {np.abs(a - b).max() / np.abs(b).max():.1e}"
                          for p, a, b in zip(PROBES, got, reference, strict=True))
        print(f"  {name:14s} layer 0 relative max |diff| vs exported: {diffs}")
    del checks
    timed = {name: session(path, args.threads, probes=False) for name, path in paths.items()}
    seconds: dict[str, list[float]] = {name: [] for name in timed}
    for _ in range(args.rounds):
        for name, sess in timed.items():
            start = time.perf_counter()
            sess.run(["logits"], feeds)
            seconds[name].append(time.perf_counter() - start)
    base = statistics.median(seconds["exported"])
    for name, values in seconds.items():
        values.sort()
        print(f"  {name:14s} median {1e3 * statistics.median(values):6.2f} ms ({statistics.median(values) / base:.3f}x)"
              f"  p10 {1e3 * values[len(values) // 10]:6.2f}  min {1e3 * values[0]:6.2f}")
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()

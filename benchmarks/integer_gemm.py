"""Weight products on the integer GEMM (export/integer_gemm.py): what each recipe costs in quality and in speed.

    python benchmarks/integer_gemm.py FLOAT_BUNDLE --out DIR [--recipes plain,0.5,0.6:8] [--threads 1]

FLOAT_BUNDLE is a float32 export of a GGUF model (`mtpedge export --precision float32 --context 512
--decode-widths 1 --out F` is enough for quality). The script makes DIR/nbits, the fast recipe's MatMulNBits
graphs (export.quant_config.FAST without fused operators, so that tensor names match the float graphs), then
one bundle per recipe, each converting nbits' graphs:
  plain       activations quantized per row, weights per column, nothing else
  A           smoothing with alpha A (SmoothQuant), from the channel maxima of calibration data
  A:F         the same, with the F largest channels of each input kept in float (LLM.int8()'s decomposition)
  R@o_proj+down_proj  recipe R on those products only; the others stay MatMulNBits (mixing is lossless too:
                      both compute a row alike at every width)
Calibration data is the float model's own answers to the project's prompts (export/qdq_bundle.calibration_stream),
never Spec-Bench or the held text. Each bundle gets export/quality.py's report against FLOAT_BUNDLE (held text);
`benchmarks/qdq_quality.py FLOAT_BUNDLE DIR/RECIPE` measures the Spec-Bench set, and `benchmarks/bundle_ab.py`
the speed of bundles with every decode width.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import onnx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from mtpedge.export.integer_gemm import IntegerGemmRecipe, to_integer_gemm  # noqa: E402
from mtpedge.export.onnx_graphs import SharedWeights  # noqa: E402
from mtpedge.export.quality import quality_report  # noqa: E402
from mtpedge.export.staging import copy_host_files  # noqa: E402
from mtpedge.runtime.bundle import read_manifest, write_manifest  # noqa: E402
from mtpedge.runtime.engine import Engine  # noqa: E402


def channel_maxima(float_bundle: Path, threads: int) -> dict[str, np.ndarray]:
    """max |x| per channel of every weight product's input, over calibration text through the widest graph."""
    import onnxruntime as ort

    from mtpedge.export.qdq import QdqConfig
    from mtpedge.export.qdq_bundle import calibration_stream

    stream = calibration_stream(float_bundle, QdqConfig(), print)
    engine = Engine.load(float_bundle, threads=threads)
    calls, run = [], engine.graphs.run
    engine.graphs.run = lambda entry, feeds, n: (calls.append((entry, dict(feeds))), run(entry, feeds, n))[1]
    width = engine.graphs.max_width
    for start in range(0, len(stream) - width, width):
        engine.reset()
        engine.run_block(engine.embed(np.asarray(stream[start:start + width])), np.arange(-1, width - 1))
    entry = calls[0][0]
    model = onnx.load(str(float_bundle / entry.file), load_external_data=False)
    weights = {t.name for t in model.graph.initializer}
    inputs = sorted({n.input[0] for n in model.graph.node if n.op_type == "MatMul" and n.input[1] in weights})
    model.graph.output.extend(onnx.helper.make_tensor_value_info(x, onnx.TensorProto.FLOAT, None) for x in inputs)
    probe = float_bundle / ".channel_maxima.onnx"  # beside weights.data, which it points at
    onnx.save(model, str(probe))
    try:
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        session = ort.InferenceSession(str(probe), options, providers=["CPUExecutionProvider"])
        names = {i.name for i in session.get_inputs()}
        maxima: dict[str, np.ndarray] = {}
        for _, feeds in calls:
            for x, value in zip(inputs, session.run(inputs, {k: v for k, v in feeds.items() if k in names}),
                                strict=True):
                peak = np.abs(value.reshape(-1, value.shape[-1])).max(0)
                maxima[x] = np.maximum(maxima.get(x, peak), peak)
    finally:
        probe.unlink()
    print(f"channel maxima of {len(inputs)} inputs over {len(calls)} calls of {width} calibration tokens")
    return maxima


def convert(nbits: Path, out: Path, recipe: IntegerGemmRecipe) -> Path:
    """A copy of the MatMulNBits bundle `nbits` with every weight product on the integer GEMM."""
    manifest = read_manifest(nbits)
    out.mkdir(parents=True)
    copy_host_files(nbits, manifest, out)
    shared = SharedWeights(out / "weights.data")
    try:
        for entry in manifest.graphs:
            model = onnx.load(str(nbits / entry.file))
            to_integer_gemm(model, recipe)
            shared.externalize(model)
            onnx.save_model(model, out / entry.file)
    finally:
        shared.close()
    write_manifest(out, manifest)
    return out


def parse_recipe(text: str, maxima: dict[str, np.ndarray]) -> IntegerGemmRecipe:
    """plain | A | A:F, each optionally @role+role (only those products; the others stay MatMulNBits)."""
    text, _, roles = text.partition("@")
    only = tuple(roles.split("+")) if roles else None
    if text == "plain":
        return IntegerGemmRecipe(roles=only)
    alpha, _, channels = text.partition(":")
    return IntegerGemmRecipe(roles=only, input_maxima=maxima, alpha=float(alpha), float_channels=int(channels or 0))


def main() -> None:
    from dataclasses import replace

    from mtpedge.export.quant_config import FAST
    from mtpedge.export.quantize_bundle import quantize_bundle
    from mtpedge.models.loading import default_model_path

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("float_bundle", type=Path)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--recipes", default="plain,0.5,0.6:8")
    parser.add_argument("--gguf", type=Path, help="the GGUF the float bundle came from (default: the embedded model)")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    nbits = args.out / "nbits"
    if not nbits.exists():
        quantize_bundle(args.float_bundle, nbits, replace(FAST, fused_ops=False), args.gguf or default_model_path(),
                        progress=print)
    maxima = channel_maxima(args.float_bundle, args.threads)
    results = {}
    for text in args.recipes.split(","):
        bundle = convert(nbits, args.out / text.replace(":", "-").replace("@", "-"), parse_recipe(text, maxima))
        report = quality_report(bundle, args.float_bundle, print, threads=args.threads)
        results[text] = {"top1_agreement": report["top1_agreement"], "perplexity": report["perplexity"]}
        print(json.dumps({text: results[text]}), flush=True)
    (args.out / "quality.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()

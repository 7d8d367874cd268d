"""mtpedge export [MODEL] [--out DIR] [--context C] [--prefill-width N] [--decode-widths 1,16] [--precision P]"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace

from mtpedge.bundles import FAST_DECODE_WIDTHS, NPU_DECODE_WIDTHS, default_bundle_dir, fast_buckets


def parse_widths(text: str) -> tuple[int, ...]:
    try:
        widths = tuple(int(w) for w in text.split(",") if w.strip())
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"widths must be comma-separated integers, got {text!r}") from err
    if not widths:
        raise argparse.ArgumentTypeError("at least one width is needed")
    return widths


def parse_buckets(text: str) -> tuple[int, ...] | str:
    return text if text in ("auto", "none") else parse_widths(text)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", nargs="?", help="GGUF file or Hugging Face folder (default: embedded SmolLM2-135M)")
    parser.add_argument("--out", help="bundle folder (default: the cache folder that generate/chat use)")
    parser.add_argument("--context", type=int, default=1024, help="KV cache positions C (default 1024)")
    parser.add_argument("--context-buckets", type=parse_buckets, default="auto",
                        help="comma-separated smaller contexts whose graphs are exported too (e.g. 256,512): the "
                             "runtime runs the smallest that holds the cache; none; or auto (default: 256,512 below "
                             "--context for the fast bundle, --precision auto of a GGUF; else none)")
    parser.add_argument("--prefill-width", type=int, default=64, help="slots of the prefill graph (default 64)")
    parser.add_argument("--decode-widths", type=parse_widths, default=None,
                        help="comma-separated slots of the decode graphs (default 1,2,4,16 for the fast bundle, "
                             "--precision auto of a GGUF; 16 alone for qdq and --target qnn: with one decode graph "
                             "drafting stays lossless on the HTP; else 1,16)")
    parser.add_argument("--mtp-adapter", metavar="FILE|default",
                        help="a `mtpedge train-mtp` checkpoint, or `default` (the one shipped for the embedded default "
                        "model): export its learned masks, gated LoRA graphs (lora_gate input) and sampler head with "
                        "the bundle (drafter `mtp`); the default --out is then the cache's `-mtp-<precision>` folder "
                        "(`-mtp` for float32)")
    parser.add_argument("--masks", default="auto", metavar="FILE|auto|none",
                        help="learned mask embeddings for the esp/hybrid drafters: a masks file (.npz), none, or "
                        "auto (default: the masks shipped for the embedded default model, when exporting exactly "
                        "those weights to float32)")
    parser.add_argument("--no-parity-check", action="store_true", help="skip the per-graph check against PyTorch")
    add_precision_arguments(parser)
    parser.add_argument("--target", choices=["cpu", "qnn"], default="cpu",
                        help="qnn: compile the QDQ graphs into QNN context binaries for --soc (needs the qnn extra)")
    parser.add_argument("--soc", help="the Snapdragon SoC for --target qnn, e.g. snapdragon-8-elite or sm8750")


def add_precision_arguments(parser: argparse.ArgumentParser, with_auto: bool = True) -> None:
    choices = (["auto"] if with_auto else []) + ["float32", "gguf", "int8", "int4", "qdq"]
    parser.add_argument("--precision", choices=choices, default=choices[0],
                        help="weights: gguf = the GGUF file's own 4/5/6/8-bit grid, exactly (MatMulNBits); "
                             "int8/int4 = round-to-nearest blocks; qdq = the Qualcomm HTP's graphs: 16-bit "
                             "activations, 8-bit GPTQ weights (16-bit LM head, v and down projections), fp16 "
                             "residual stream; auto = for GGUF sources the fast default (gguf with int8-activation "
                             "kernels, the bundle generate/chat/serve/bench use; with --mtp-adapter its LoRA "
                             "factors stay float32), else float32")
    parser.add_argument("--output-layer", choices=["same", "float32", "int8", "int4"], default="same",
                        help="precision of the output (lm_head) layer (default: same as --precision)")
    parser.add_argument("--block-size", type=int, default=32, help="int8/int4 block size (default 32)")
    parser.add_argument("--int8-activations", action="store_true",
                        help="4-bit blocks multiply int8-quantized activations (MatMulNBits accuracy_level 4): "
                             "faster on CPU, slightly less exact")
    parser.add_argument("--kernels", choices=["auto", "onnxruntime", "mtpedge"], default="auto",
                        help="CPU kernels of the weight products: mtpedge = mtpedge's own (runtime/kernels: weights "
                             "shared across a call's rows, Q4_1 minima in the same pass; int8 activations; the "
                             "bundle then needs the kernel library where it runs), onnxruntime = MatMulNBits; auto = "
                             "mtpedge's where its AVX-512 VNNI path runs and the recipe has int8 activations")
    parser.add_argument("--no-quality-report", action="store_true",
                        help="skip the perplexity / top-1 / latency comparison with the float graphs")


def quant_config(args: argparse.Namespace, is_gguf: bool):
    """The QuantConfig the precision options ask for, or None for float32 graphs."""
    from mtpedge.export.quant_config import QuantConfig

    precision = args.precision
    if precision == "auto" and is_gguf:  # learned masks attach to it too (ExportConfig)
        from mtpedge.export.quant_config import fast_recipe

        return _with_kernels(replace(fast_recipe(), quality_report=not args.no_quality_report), args.kernels)
    if precision == "auto":
        precision = "float32"
    if precision == "float32":
        return None
    if precision == "gguf" and not is_gguf:
        raise ValueError("--precision gguf needs a GGUF source (its grid is what is kept): "
                         "use --precision int8 or int4 for a Hugging Face folder")
    if precision == "qdq":
        from mtpedge.export.qdq import QdqConfig

        return QdqConfig()
    return _with_kernels(QuantConfig(weights=precision, output_layer=args.output_layer, block_size=args.block_size,
                                     accuracy_level=4 if args.int8_activations else 0,
                                     quality_report=not args.no_quality_report), args.kernels)


def _with_kernels(config, kernels: str):
    """`config` on the kernels --kernels names (auto: mtpedge's where they pay here and the recipe allows them)."""
    if kernels == "auto":
        from mtpedge.runtime.kernels import native_kernels_pay

        kernels = "mtpedge" if config.accuracy_level == 4 and native_kernels_pay() else "onnxruntime"
    if kernels == "mtpedge":
        from mtpedge.runtime.kernels import KernelsUnavailable, library

        try:
            library()
        except KernelsUnavailable as err:
            raise ValueError(f"--kernels mtpedge: {err}") from err
    return replace(config, kernels=kernels)


def target_soc(args: argparse.Namespace) -> str | None:
    if args.target == "cpu":
        if args.soc:
            raise ValueError("--soc only applies to --target qnn")
        return None
    if not args.soc:
        raise ValueError("--target qnn needs --soc NAME (e.g. snapdragon-8-elite)")
    if args.precision == "auto":
        args.precision = "qdq"
    return args.soc


def export_plan(args: argparse.Namespace):
    """(bundle folder, ExportConfig) of the command line: every option checked before the model loads."""
    from mtpedge.export.bundle_writer import ExportConfig

    is_gguf = args.model is None or str(args.model).endswith(".gguf")  # the default model is a GGUF
    soc = target_soc(args)  # first: --target qnn makes "auto" mean qdq
    quantization = quant_config(args, is_gguf)
    # the cache folder names what it holds, so a quantized export never stands in for the float bundle
    # that `generate`/`chat` export for themselves (and compare against)
    kind = None
    if quantization is not None:  # QDQ keeps its plain "qdq" folder; MatMulNBits bundles are named by their label
        kind = quantization.label.replace("+out:", "-out-") if hasattr(quantization, "weights") else "qdq"
    label = f"{kind}-{soc}" if kind and soc else kind
    if args.mtp_adapter:  # adapter graphs make every call a little slower: never the plain default bundle
        label = f"mtp-{label}" if label else "mtp"
    out = args.out or default_bundle_dir(args.model, args.context, label)
    # auto: what generate/chat/serve/bench export for themselves
    fast = args.precision == "auto" and is_gguf and not soc
    decode_widths = args.decode_widths or (FAST_DECODE_WIDTHS if fast else NPU_DECODE_WIDTHS if kind == "qdq"
                                           else (1, 16))
    buckets = args.context_buckets
    if buckets in ("auto", "none"):
        widest = max(args.prefill_width, *decode_widths)
        buckets = fast_buckets(args.context, widest) if buckets == "auto" and fast else ()
    config = ExportConfig(context=args.context, context_buckets=buckets, prefill_width=args.prefill_width,
                          decode_widths=decode_widths, check_parity=not args.no_parity_check,
                          quantization=quantization, target_soc=soc, mtp_adapter=args.mtp_adapter,
                          learned_masks=args.masks)
    return out, config


def run(args: argparse.Namespace) -> int:
    try:
        from mtpedge.export.bundle_writer import export_bundle
        from mtpedge.export.learned_masks import MasksFileError
        from mtpedge.models.loading import ModelLoadError
    except ImportError as err:
        raise SystemExit(
            f"export needs the export extras ({err.name} is missing): pip install 'mtpedge[export]'"
        ) from err
    out, config = export_plan(args)
    try:
        export_bundle(args.model, out, config, progress=print)
    except (ModelLoadError, MasksFileError) as err:
        print(f"mtpedge export: error: {err}", file=sys.stderr)
        return 2
    return 0

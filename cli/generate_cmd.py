"""mtpedge generate "prompt" [--bundle DIR | --model PATH [--context N]] [--drafter SPEC] [--max-new-tokens N]
   [sampling] [--json]

The drafter is one spec, e.g. `--drafter hybrid:width=32:masks=2`; `mtpedge drafters` lists every drafter and its
options. Every option is checked before the engine loads. Generation stops at the model's stop token, at
--max-new-tokens, or when the context is full (finish_reason "length"); what was generated is printed either way.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

from mtpedge.bundles import COST_MODEL_HELP, DMTD_DRAFTERS, PRECISIONS, attach_cost_table, ensure_bundle
from mtpedge.runtime.sampling import SamplingConfig

DEFAULT_CONTEXT = 1024  # of an automatic export


def drafter_spec(text: str):
    """argparse type of --drafter: a checked DrafterSpec (the message names the valid options)."""
    from mtpedge.runtime.drafters import parse_drafter

    try:
        return parse_drafter(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from err


def add_precision_argument(parser: argparse.ArgumentParser) -> None:
    """--precision of the bundle exported when no --bundle is given (generate, chat, serve, bench)."""
    parser.add_argument("--precision", choices=PRECISIONS, default="auto",
                        help="bundle exported when no --bundle is given: auto (default) = for a GGUF model (the "
                             "default model is one) the fast bundle, the file's own 4/8-bit grid in int8-activation "
                             "kernels; float32 = the traced float32 graphs (parity work)")


def add_common_arguments(parser: argparse.ArgumentParser, max_new_tokens: int | None) -> None:
    """Options shared by generate and chat (max_new_tokens: the default limit; None = up to the context)."""
    from mtpedge.runtime.drafters import DEFAULT_DRAFTER, drafter_names

    parser.add_argument("--bundle", help="bundle folder (default: export --model, or the default model, once)")
    parser.add_argument("--model", help="GGUF file or Hugging Face folder to export when no --bundle is given")
    parser.add_argument("--context", type=int, default=None,
                        help=f"context of an automatic export (default {DEFAULT_CONTEXT}; a --bundle has its own)")
    add_precision_argument(parser)
    parser.add_argument("--max-new-tokens", type=int, default=max_new_tokens,
                        help=f"most new tokens per reply (default {max_new_tokens or 'none: up to the context'})")
    parser.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    parser.add_argument("--top-k", type=int, default=None, help="sample from the K most likely tokens only "
                        "(default 40 when sampling; 0 = no limit)")
    parser.add_argument("--top-p", type=float, default=None, help="sample from the smallest set of tokens whose "
                        "probabilities add up to P (default 0.95 when sampling; 1 = no limit)")
    parser.add_argument("--min-p", type=float, default=None, help="drop tokens less than MIN_P times as likely as "
                        "the most likely one (default 0.05 when sampling; 0 = no limit)")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--threads", type=int, default=None, help="onnxruntime intra-op threads")
    parser.add_argument("--device", choices=["cpu", "qnn"], default="cpu",
                        help="qnn: run the graphs on the Qualcomm HTP through onnxruntime's QNN execution provider "
                             "(the HTP simulator on x86 Linux; needs the qnn extra), CPU fallback disabled")
    parser.add_argument("--cost-model", default="measured", metavar="measured|remeasure|flat|FILE",
                        help=COST_MODEL_HELP)
    parser.add_argument("--drafter", type=drafter_spec, default=None, metavar="SPEC",
                        help=f"multi-token drafter and its options, NAME[:KEY=VALUE]... (NAME: "
                             f"{', '.join(drafter_names())}; default: {DEFAULT_DRAFTER}, the fastest lossless one, "
                             "where the bundle's wide calls compute a drafted chain's rows as plain decoding does on "
                             "this machine (probed once), else none = plain decoding); e.g. "
                             "hybrid:width=32. `mtpedge drafters` lists the options. mtp needs a bundle with a trained "
                             "adapter; dmtd-spec / dmtd a DMTD bundle (`mtpedge train-dmtd --export-bundle`); dmtd is "
                             "LOSSY (its tokens are not verified)")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("prompt", help="the prompt text ('-' reads standard input)")
    add_common_arguments(parser, max_new_tokens=128)
    parser.add_argument("--raw", action="store_true", help="do not apply the chat template")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of streaming text")


def providers_for(args: argparse.Namespace) -> list[str] | None:
    """onnxruntime providers for --device (None: the runtime's CPU default)."""
    from mtpedge.runtime.qnn import QNN_EP

    return [QNN_EP] if args.device == "qnn" else None


def sampling_from(args: argparse.Namespace) -> SamplingConfig:
    return SamplingConfig.with_defaults(args.temperature, args.top_k, args.top_p, args.min_p, args.seed)


def check_options(args: argparse.Namespace) -> SamplingConfig:
    """Refuse options that cannot work, before anything loads; the sampling settings."""
    from mtpedge.runtime.drafters import DRAFTERS, parse_drafter

    if args.drafter is not None:  # None: the bundle's default, chosen once it is known (load_engine)
        args.drafter = parse_drafter(args.drafter)
    if args.max_new_tokens is not None and args.max_new_tokens < 1:
        raise ValueError(f"--max-new-tokens must be at least 1, got {args.max_new_tokens}")
    if not math.isfinite(args.temperature) or args.temperature < 0:
        raise ValueError(f"--temperature must be a finite number >= 0, got {args.temperature}")
    if args.bundle and args.context is not None:
        raise ValueError("--context sets the context of an automatic export, but --bundle names a bundle whose "
                         "context is fixed: drop --context (or export a bundle with it)")
    if args.context is not None and args.context < 2:
        raise ValueError(f"--context must be at least 2, got {args.context}")
    sampling = sampling_from(args)
    drafter = DRAFTERS.get(args.drafter.name) if args.drafter is not None else None
    if drafter is not None and drafter.lossy and not sampling.greedy:
        raise ValueError(f"{args.drafter.name} is lossy and decodes greedily only: drop --temperature")
    return sampling


def bundle_for_drafter(args: argparse.Namespace, say=print) -> Path:
    """The bundle to run (--bundle, or the automatic export: the -mtp / -dmtd one when --drafter needs it); a
    drafter left unnamed becomes that bundle's default (runtime.drafters.default_drafter)."""
    from mtpedge.runtime.bundle import read_manifest
    from mtpedge.runtime.drafters import default_drafter, parse_drafter

    named = args.drafter.name if args.drafter is not None else None
    folder = ensure_bundle(args.bundle, args.model, args.context or DEFAULT_CONTEXT, say=say,
                           mtp=named == "mtp", dmtd=named in DMTD_DRAFTERS, precision=args.precision)
    args.drafter_defaulted = args.drafter is None
    if args.drafter is None:
        args.drafter = parse_drafter(default_drafter(read_manifest(folder)))
    return folder


def settle_drafter(args: argparse.Namespace, engine, say=print) -> None:
    """Where this machine's kernels compute a wide call's rows otherwise than a width-1 call (runtime/row_probe.py,
    probed once per bundle and machine), a defaulted drafter becomes plain decoding, which is lossless by
    definition, and a named one is kept with a warning."""
    from mtpedge.bundles import cache_root
    from mtpedge.runtime.drafters import NONE, parse_drafter
    from mtpedge.runtime.row_probe import row_probe_for

    if args.drafter.name == NONE:
        return
    probe = row_probe_for(engine, cache_root() / "costs", say=say)
    if probe.invariant:
        return
    if getattr(args, "drafter_defaulted", False):
        say(f"{probe.describe()}: decoding plainly (a default must be lossless; --drafter {args.drafter} drafts "
            "anyway)")
        args.drafter = parse_drafter(NONE)
    else:
        print(f"warning: {probe.describe()}: {args.drafter}'s answer may differ from plain decoding's "
              "(--precision float32 for token-identical drafting)", file=sys.stderr)


def load_engine(args: argparse.Namespace, say=print, cost_table: bool = False, eager: bool = True):
    """The engine of --bundle (or of the automatic export), after the drafter spec is checked against the bundle's
    graph widths; prints the lossy warning for a lossy drafter. The engine gets its --cost-model table when the
    drafter sizes its trees, or always with `cost_table` (chat: the drafter may change). eager=False: sessions
    are created when `generate` needs them (a one-shot answer)."""
    from mtpedge.runtime.bundle import read_manifest
    from mtpedge.runtime.cost_table import decode_widths
    from mtpedge.runtime.drafters import DRAFTERS, check_fits
    from mtpedge.runtime.engine import Engine
    from mtpedge.runtime.generate import LOSSY_WARNING

    folder = bundle_for_drafter(args, say)
    check_fits(args.drafter, decode_widths(read_manifest(folder)))
    if args.drafter.name in DRAFTERS and DRAFTERS[args.drafter.name].lossy:
        print(f"warning: {LOSSY_WARNING.format(name=args.drafter.name)}", file=sys.stderr)
    engine = Engine.load(folder, threads=args.threads, providers=providers_for(args), eager=eager)
    settle_drafter(args, engine, say)
    if cost_table or (args.drafter.name in DRAFTERS and DRAFTERS[args.drafter.name].sized):
        # the HTP simulator takes seconds a call: timing it says nothing about a phone, whose widths cost about
        # the same (a profile's cost file says how much)
        on_simulator = args.device == "qnn" and args.cost_model == "measured"
        attach_cost_table(engine, "flat" if on_simulator else args.cost_model, say)
    return engine


def format_stats(stats: dict) -> str:
    return (f"drafter {stats['drafter']}: {stats['new_tokens']} tokens, {stats['forward_calls']} graph calls "
            f"(τ {stats['tokens_per_call']:.2f} tokens/call), {stats['tokens_per_s']:.1f} tokens/s, "
            f"prefill {stats['prompt_tokens']} tokens in {stats['prefill_s']:.2f} s, "
            f"graph {stats['graph_s']:.2f} s + host {stats['host_s']:.2f} s, finish {stats['finish_reason']}"
            + "".join(f", {calls} {kind} steps" for kind, calls in (stats.get("drafter_steps") or {}).items()))


def run(args: argparse.Namespace) -> int:
    from mtpedge.runtime.drafters import make_drafter
    from mtpedge.runtime.generate import generate
    from mtpedge.runtime.tokenizer import StreamDecoder

    sampling = check_options(args)
    prompt = sys.stdin.read() if args.prompt == "-" else args.prompt
    say = (lambda msg: print(msg, file=sys.stderr)) if args.json else print
    engine = load_engine(args, say, eager=False)
    tok = engine.tokenizer
    use_chat = not args.raw and tok.has_chat_template
    prompt_ids = tok.encode_chat([{"role": "user", "content": prompt}]) if use_chat else tok.encode(prompt)
    stream = StreamDecoder(tok)

    def show(tokens: list[int]) -> None:
        print(stream.push(tokens), end="", flush=True)

    result = generate(engine, prompt_ids, args.max_new_tokens, sampling, on_tokens=None if args.json else show,
                      drafter=make_drafter(args.drafter, engine), on_overflow="stop")
    stats = result.stats.to_dict()
    if args.json:
        print(json.dumps({"text": tok.decode(result.token_ids), "token_ids": result.token_ids, **stats}))
    else:
        print()
        print(f"[{format_stats(stats)}]", file=sys.stderr)
    return 0

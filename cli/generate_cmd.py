"""mtpedge generate "prompt" [--bundle DIR | --model PATH] [--max-new-tokens N] [sampling] [--json]"""

from __future__ import annotations

import argparse
import json
import sys

from mtpedge.bundles import ensure_bundle
from mtpedge.runtime.sampling import SamplingConfig


def add_common_arguments(parser: argparse.ArgumentParser) -> None:
    """Options shared by generate and chat."""
    parser.add_argument("--bundle", help="bundle folder (default: export --model, or the default model, once)")
    parser.add_argument("--model", help="GGUF file or Hugging Face folder to export when no --bundle is given")
    parser.add_argument("--context", type=int, default=1024, help="context of an automatic export (default 1024)")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    parser.add_argument("--top-k", type=int, default=0)
    parser.add_argument("--top-p", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--threads", type=int, default=None, help="onnxruntime intra-op threads")
    parser.add_argument("--device", choices=["cpu", "qnn"], default="cpu",
                        help="qnn: run the graphs on the Qualcomm HTP through onnxruntime's QNN execution provider "
                             "(the HTP simulator on x86 Linux; needs the qnn extra), CPU fallback disabled")
    parser.add_argument("--drafter", default="none",
                        choices=["none", "esp", "lookup", "hybrid", "mtp", "dmtd-spec", "dmtd"],
                        help="multi-token drafter (none = plain decoding; default); see `mtpedge.runtime.drafters`. "
                             "mtp needs a bundle with a trained adapter (`mtpedge export --mtp-adapter`); "
                             "dmtd-spec / dmtd need a DMTD bundle (`mtpedge train-dmtd --export-bundle`); "
                             "dmtd is LOSSY (unverified tokens between cycle heads; output differs from the model's)")
    group = parser.add_argument_group("drafter settings (each drafter's own default when omitted)")
    group.add_argument("--width", type=int, default=None,
                       help="slots per decode call the drafter may fill (tree nodes + mask slots)")
    group.add_argument("--masks", type=int, default=None, help="esp/hybrid: mask slots k after each node (1-3)")
    group.add_argument("--mask-init", choices=["soft", "hard", "sample", "mean", "learned"], default=None,
                       help="esp/hybrid: mask embedding init (mean = vocab mean; learned = the bundle's trained "
                            "adapter masks, see train-mtp; default: learned when the bundle has them, else mean)")
    group.add_argument("--mask-update", type=float, default=None,
                       help="esp/hybrid: online update rate lambda of the mask embeddings (default 0.1; 0 for learned)")
    group.add_argument("--tree", default=None, help="esp: dynamic, static, or static:W1,W2,... per-depth widths")
    group.add_argument("--mtp-layout", choices=["linear", "quadratic", "tree"], default=None,
                       help="mtp: masks after the last draft only (linear), after every draft of a chain "
                            "(quadratic), or a tree of drafts with masks where the accepted path likely ends (tree, "
                            "the default)")
    group.add_argument("--branch", type=int, default=None, help="mtp tree: best tokens tried after each node (4)")
    group.add_argument("--mtp-lookup", action="store_const", const=True, default=None,
                       help="mtp tree: prompt-lookup chains in the same tree (as the hybrid drafter does)")
    group.add_argument("--max-ngram", type=int, default=None, help="lookup/hybrid: longest n-gram matched")
    group.add_argument("--branches", type=int, default=None,
                       help="lookup/hybrid: distinct n-gram continuations in one tree")
    group.add_argument("--mask-gain", type=float, default=None,
                       help="hybrid / mtp tree: give mask slots only where they pay, valuing a forecast at this many "
                       "tokens (hybrid default: every node gets its masks; mtp tree default 2.0)")
    group.add_argument("--extend", type=int, default=None,
                       help="hybrid: lookup chains after this many of the best mask candidates (default 0)")
    group.add_argument("--tau", type=int, default=None, help="dmtd: cycle length τ (default 4)")
    group.add_argument("--draft-len", type=int, default=None, help="dmtd-spec: draft tokens per step (default 3)")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("prompt", help="the prompt text ('-' reads standard input)")
    add_common_arguments(parser)
    parser.add_argument("--raw", action="store_true", help="do not apply the chat template")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of streaming text")


def providers_for(args: argparse.Namespace) -> list[str] | None:
    """onnxruntime providers for --device (None: the runtime's CPU default)."""
    from mtpedge.runtime.qnn import QNN_EP

    return [QNN_EP] if args.device == "qnn" else None


def sampling_from(args: argparse.Namespace) -> SamplingConfig:
    return SamplingConfig(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p, seed=args.seed)


def drafter_options(args: argparse.Namespace) -> dict:
    """The drafter settings given on the command line (None = the drafter's default; make_drafter drops them)."""
    options = {"width": args.width, "masks": args.masks, "mask_init": args.mask_init, "mask_update": args.mask_update,
               "tree": args.tree, "max_ngram": args.max_ngram, "branches": args.branches,
               "mtp_layout": args.mtp_layout, "branch": getattr(args, "branch", None),
               "lookup": getattr(args, "mtp_lookup", None),
               "mask_gain": getattr(args, "mask_gain", None), "extend": getattr(args, "extend", None)}
    return {key: value for key, value in options.items() if value is not None}


def format_stats(stats: dict) -> str:
    return (f"{stats['new_tokens']} tokens, {stats['forward_calls']} graph calls "
            f"({stats['tokens_per_call']:.2f} tokens/call), {stats['tokens_per_s']:.1f} tokens/s, "
            f"prefill {stats['prompt_tokens']} tokens in {stats['prefill_s']:.2f} s, "
            f"graph {stats['graph_s']:.2f} s + host {stats['host_s']:.2f} s")


def run(args: argparse.Namespace) -> int:
    from mtpedge.runtime.drafters import make_drafter
    from mtpedge.runtime.engine import Engine
    from mtpedge.runtime.generate import generate
    from mtpedge.runtime.tokenizer import StreamDecoder

    sampling = sampling_from(args)
    prompt = sys.stdin.read() if args.prompt == "-" else args.prompt
    say = (lambda msg: print(msg, file=sys.stderr)) if args.json else print
    engine = Engine.load(ensure_bundle(args.bundle, args.model, args.context, say=say, mtp=args.drafter == "mtp"),
                         threads=args.threads, providers=providers_for(args))
    tok = engine.tokenizer
    use_chat = not args.raw and tok.has_chat_template
    prompt_ids = tok.encode_chat([{"role": "user", "content": prompt}]) if use_chat else tok.encode(prompt)
    stream = StreamDecoder(tok)

    def show(tokens: list[int]) -> None:
        print(stream.push(tokens), end="", flush=True)

    if args.drafter in ("dmtd", "dmtd-spec"):  # part-graph methods of a DMTD bundle (runtime/dmtd.py)
        from mtpedge.runtime.dmtd import LOSSY_WARNING, run_dmtd_method
        from mtpedge.runtime.dmtd_parts import DmtdParts

        if args.drafter == "dmtd":
            print(f"warning: {LOSSY_WARNING}", file=sys.stderr)
        result = run_dmtd_method(args.drafter, DmtdParts(engine, threads=args.threads), prompt_ids,
                                 args.max_new_tokens, sampling, on_tokens=None if args.json else show,
                                 tau=getattr(args, "tau", None), draft_len=getattr(args, "draft_len", None))
    else:
        try:
            drafter = make_drafter(args.drafter, engine, **drafter_options(args))
        except ValueError as err:
            raise SystemExit(f"mtpedge generate: error: {err}") from err
        result = generate(engine, prompt_ids, args.max_new_tokens, sampling, on_tokens=None if args.json else show,
                          drafter=drafter)
    stats = result.stats.to_dict()
    if args.json:
        text = tok.decode(result.token_ids)
        print(json.dumps({"text": text, "token_ids": result.token_ids, **stats}))
    else:
        print()
        print(f"[{format_stats(stats)}]", file=sys.stderr)
    return 0

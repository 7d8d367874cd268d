"""The `mtpedge` command: one sub-command per entry point, each in its own module."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading

COMMANDS = {
    "export": ("mtpedge.export_cmd", "export a model (GGUF file or Hugging Face folder) to a bundle"),
    "quantize": ("mtpedge.quantize_cmd", "quantize the weights of an exported float32 bundle (with a quality report)"),
    "compile-qnn": ("mtpedge.compile_qnn_cmd", "compile a QDQ bundle into QNN context binaries for a Snapdragon SoC"),
    "hub": ("mtpedge.hub_cmd", "Qualcomm AI Hub jobs (compile, profile, inference) for a QDQ bundle"),
    "distill": ("mtpedge.distill_cmd",
                "self-distilled training data (the model's own answers to the project's prompts)"),
    "train-mtp": ("mtpedge.train_mtp_cmd", "train the multi-token adapter (learned masks, gated LoRA, sampler head)"),
    "train-ngrams": ("mtpedge.train_ngrams_cmd", "count a static n-gram table of the model's own answers (for "
                                                 "`lookup`)"),
    "generate": ("mtpedge.generate_cmd", "generate a completion for one prompt"),
    "drafters": ("mtpedge.drafters_cmd", "list the drafters and their options (the SPEC of --drafter and --methods)"),
    "chat": ("mtpedge.chat_cmd", "interactive chat with streaming output"),
    "serve": ("mtpedge.serve_cmd", "OpenAI-compatible local HTTP server (/v1/chat/completions, /v1/completions)"),
    "train-dmtd": ("mtpedge.train_dmtd_cmd", "train DMTD's late-layer decoding copy (and export a DMTD bundle)"),
    "bench": ("mtpedge.bench_cmd", "Spec-Bench questions through every decoding method and peer, plus a width sweep"),
    "verify": ("mtpedge.verify_cmd", "check a bundle's files against the SHA-256 hashes its export recorded"),
}


def _terminated(signum, frame) -> None:
    """SIGTERM ends a command as Ctrl-C does, through its cleanup (an export removes its temporary folder),
    but as SystemExit, so that nothing that catches KeyboardInterrupt (chat's prompt) keeps running."""
    print("\nterminated", file=sys.stderr)
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    import importlib

    parser = argparse.ArgumentParser(prog="mtpedge", description="multi-token prediction for LLMs on edge devices")
    parser.add_argument("-v", "--verbose", action="store_true", help="log library progress (INFO)")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (module_name, help_text) in COMMANDS.items():
        command = sub.add_parser(name, help=help_text, description=help_text)
        importlib.import_module(module_name).add_arguments(command)
        command.set_defaults(module=module_name)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(name)s: %(message)s")
    from mtpedge.runtime.bundle import BundleError
    from mtpedge.runtime.kv_cache import ContextOverflowError

    in_main_thread = threading.current_thread() is threading.main_thread()  # where Python runs signal handlers
    previous = signal.signal(signal.SIGTERM, _terminated) if in_main_thread else None
    try:
        return importlib.import_module(args.module).run(args) or 0
    except (BundleError, ContextOverflowError, ValueError, FileNotFoundError) as err:
        print(f"mtpedge {args.command}: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return 130
    finally:
        if in_main_thread:
            signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)


if __name__ == "__main__":
    raise SystemExit(main())

"""mtpedge chat: an interactive conversation with streaming replies, kept in the chat template."""

from __future__ import annotations

import argparse
import sys

from mtpedge.bundles import ensure_bundle
from mtpedge.generate_cmd import add_common_arguments, drafter_options, format_stats, sampling_from


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_common_arguments(parser)
    parser.add_argument("--system", help="system prompt")


def run(args: argparse.Namespace) -> int:
    from mtpedge.runtime.drafters import make_drafter
    from mtpedge.runtime.engine import Engine
    from mtpedge.runtime.generate import generate
    from mtpedge.runtime.tokenizer import StreamDecoder

    engine = Engine.load(ensure_bundle(args.bundle, args.model, args.context), threads=args.threads)
    tok = engine.tokenizer
    sampling = sampling_from(args)
    drafter = make_drafter(args.drafter, engine, **drafter_options(args))
    base = [{"role": "system", "content": args.system}] if args.system else []
    history: list[dict[str, str]] = []
    print("mtpedge chat — empty line or Ctrl-D to quit, /reset to clear the conversation", file=sys.stderr)
    while True:
        try:
            line = input("> ")
        except EOFError:
            print()
            return 0
        if not line.strip():
            return 0
        if line.strip() == "/reset":
            history.clear()
            print("(conversation cleared)", file=sys.stderr)
            continue
        history.append({"role": "user", "content": line})
        prompt_ids = tok.encode_chat(base + history)
        # keep the newest turns that fit, leaving room for the reply
        while len(prompt_ids) + args.max_new_tokens > engine.context and len(history) > 1:
            del history[: 2 if len(history) > 2 else 1]  # the oldest user/assistant pair
            prompt_ids = tok.encode_chat(base + history)
        stream = StreamDecoder(tok)
        try:
            result = generate(engine, prompt_ids, args.max_new_tokens, sampling, on_overflow="stop", drafter=drafter,
                              on_tokens=lambda ids: print(stream.push(ids), end="", flush=True))
        except KeyboardInterrupt:
            print("\n(reply stopped)", file=sys.stderr)
            history.pop()
            continue
        print()
        history.append({"role": "assistant", "content": tok.decode(result.token_ids)})
        print(f"[{format_stats(result.stats.to_dict())}]", file=sys.stderr)

"""mtpedge chat: an interactive conversation with streaming replies, kept in the chat template.

Multi-line input: end a line with a backslash to go on, or wrap a block in lines of three double quotes.
Commands: /help, /reset, /stats, /drafter [NAME], /system [TEXT], /quit. Ctrl-C while a reply streams stops
that reply (the part shown stays in the conversation); Ctrl-C at the prompt clears the line; Ctrl-D quits.
When the conversation outgrows the context, the oldest exchanges are dropped, and the chat says so.
"""

from __future__ import annotations

import argparse
import signal
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from mtpedge.bundles import ensure_bundle
from mtpedge.generate_cmd import add_common_arguments, drafter_options, format_stats, providers_for, sampling_from

if TYPE_CHECKING:  # the runtime (onnxruntime) is imported only when a chat starts
    from mtpedge.chat_session import ChatSession

HELP = """commands:
  /reset           forget the conversation (the system prompt stays)
  /stats           statistics of the last reply and of the session
  /drafter [NAME]  show the drafters, or switch to NAME (none = plain decoding)
  /system [TEXT]   show or set the system prompt (setting it also resets the conversation)
  /quit            leave (or Ctrl-D)
multi-line input: end a line with \\ to continue it, or put the text between two lines of \"\"\"
Ctrl-C stops a reply that is streaming; the part already shown stays in the conversation"""
BLOCK = '"""'


@contextmanager
def ctrl_c_stops() -> Iterator[Callable[[], bool]]:
    """While inside, Ctrl-C sets a flag (polled by generate between steps) instead of raising."""
    pressed = []
    previous = signal.signal(signal.SIGINT, lambda *_: pressed.append(True))
    try:
        yield lambda: bool(pressed)
    finally:
        signal.signal(signal.SIGINT, previous)


def read_message(read: Callable[[str], str]) -> str:
    """One message: a line, lines joined by trailing backslashes, or a \"\"\" block. EOFError at the end."""
    line = read("> ")
    if line.strip().startswith(BLOCK):
        first = line.strip()[len(BLOCK):]
        if first.endswith(BLOCK):  # """one line"""
            return first[: -len(BLOCK)]
        lines = [first] if first else []
        while True:
            line = read(". ")
            if line.rstrip().endswith(BLOCK):
                lines.append(line.rstrip()[: -len(BLOCK)])
                return "\n".join(lines).strip("\n")
            lines.append(line)
    lines = []
    while line.endswith("\\"):
        lines.append(line[:-1])
        line = read(". ")
    return "\n".join([*lines, line])


def repl(session: ChatSession, read: Callable[[str], str] = input, out=sys.stdout, err=sys.stderr) -> int:
    """The loop: read a message or a command, stream the reply; returns the exit status."""
    from mtpedge.chat_session import ContextFullError

    def say(message: str) -> None:
        print(message, file=err, flush=True)

    say(f"mtpedge chat ({session.engine.manifest.model_name}, context {session.engine.context}, drafter "
        f"{session.drafter_name}) — /help for commands, Ctrl-D to quit")
    while True:
        try:
            text = read_message(read)
        except EOFError:
            print(file=out)
            return 0
        except KeyboardInterrupt:
            say("\n(input cleared — Ctrl-D or /quit to leave)")
            continue
        if not text.strip():
            continue
        if text.startswith("/"):
            if run_command(session, text.strip(), say):
                return 0
            continue
        try:
            with ctrl_c_stops() as stopped:
                reply = session.reply(text, lambda delta: print(delta, end="", file=out, flush=True), stopped)
        except ContextFullError as error:
            say(f"(not sent: {error})")
            continue
        print(file=out, flush=True)
        if reply.dropped_exchanges:
            say(f"(context: dropped the oldest {reply.dropped_exchanges} exchange(s) to fit the "
                f"{session.engine.context}-token context)")
        if reply.stopped:
            say("(reply stopped; the part shown stays in the conversation)")
        elif reply.stats.finish_reason == "length" and reply.stats.new_tokens < session.max_new_tokens:
            say("(reply cut short: the context is full — /reset to start over)")
        say(f"[{format_stats(reply.stats.to_dict())}]")


def run_command(session: ChatSession, line: str, say: Callable[[str], None]) -> bool:
    """Carry out one /command; True means quit."""
    name, _, arg = line.partition(" ")
    arg = arg.strip()
    if name in ("/quit", "/exit"):
        return True
    if name == "/help":
        say(HELP)
    elif name == "/reset":
        session.reset()
        say("(conversation cleared)")
    elif name == "/stats":
        say(session.stats_report())
    elif name == "/drafter":
        if not arg:
            from mtpedge.runtime.drafters import drafter_names

            say(f"drafter: {session.drafter_name} (available: {', '.join(drafter_names())})")
        else:
            try:
                session.set_drafter(arg)
                say(f"(drafter: {arg})")
            except ValueError as error:
                say(f"({error})")
    elif name == "/system":
        if arg:
            session.system = arg
            session.reset()
            say("(system prompt set; conversation cleared)")
        else:
            say(f"system prompt: {session.system or '(none)'}")
    else:
        say(f"(unknown command {name}: /help lists them)")
    return False


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_common_arguments(parser)
    parser.add_argument("--system", help="system prompt")


def run(args: argparse.Namespace) -> int:
    try:
        import readline  # noqa: F401 - line editing and history for input()
    except ImportError:
        pass
    from mtpedge.chat_session import ChatSession
    from mtpedge.runtime.engine import Engine

    engine = Engine.load(ensure_bundle(args.bundle, args.model, args.context, mtp=args.drafter == "mtp"),
                         threads=args.threads, providers=providers_for(args))
    session = ChatSession(engine, sampling_from(args), args.max_new_tokens, args.drafter, args.system,
                          drafter_options(args))
    return repl(session)

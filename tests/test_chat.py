"""mtpedge chat: multi-line input, commands, context-window management and Ctrl-C, on a tiny random model."""

from __future__ import annotations

import io
import signal
import subprocess
import sys

import pytest

from mtpedge.chat_cmd import read_message, repl
from mtpedge.chat_session import ChatSession, ContextFullError, MessageRefused
from mtpedge.runtime.engine import Engine
from mtpedge.runtime.generate import generate
from mtpedge.runtime.sampling import SamplingConfig
from tests.conftest import copy_bundle, set_chat_template

GREEDY = SamplingConfig()


@pytest.fixture(scope="module")
def engine(bundle):
    return Engine.load(bundle)


def scripted(lines: list[str]):
    """An input() stand-in that returns `lines` in turn, then raises EOFError (Ctrl-D)."""
    pending = list(lines)

    def read(prompt: str) -> str:
        if not pending:
            raise EOFError
        line = pending.pop(0)
        if isinstance(line, BaseException):
            raise line
        return line

    return read


@pytest.mark.parametrize("lines, message", [
    (["hello"], "hello"),
    (["first \\", "second\\", "third"], "first \nsecond\nthird"),
    (['"""', "a poem", "", "  indented", '"""'], "a poem\n\n  indented"),
    (['"""start', 'end"""'], "start\nend"),
    (['"""one line"""'], "one line"),
])
def test_multi_line_input(lines, message):
    assert read_message(scripted(lines)) == message


def greedy_reply(engine: Engine, messages: list[dict[str, str]], max_tokens: int) -> str:
    ids = engine.tokenizer.encode_chat(messages)
    return engine.tokenizer.decode(generate(engine, ids, max_tokens, on_overflow="stop").token_ids)


def test_replies_continue_the_conversation(engine):
    session = ChatSession(engine, GREEDY, 20, system="Be brief.")
    shown = []
    first = session.reply("Hi", shown.append)
    assert "".join(shown) == first.text
    expected = greedy_reply(engine, [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}], 20)
    assert first.text == expected
    second = session.reply("And then?")
    history = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
               {"role": "assistant", "content": first.text}, {"role": "user", "content": "And then?"}]
    assert second.text == greedy_reply(engine, history, 20)
    assert len(session.history) == 4 and session.replies == 2
    assert session.context_used() == second.stats.prompt_tokens + second.stats.new_tokens  # what the cache holds
    session.reset()
    assert session.history == [] and session.context_used() == 0


def test_the_oldest_exchanges_are_dropped_when_the_context_fills(engine):
    session = ChatSession(engine, GREEDY, 40)
    message = "word " * 12  # ~50 tokens here: three exchanges with replies outgrow the 256-token context
    replies = [session.reply(f"{i} {message}") for i in range(5)]
    dropped = [r.dropped_exchanges for r in replies]
    assert dropped[0] == 0 and sum(dropped) >= 2
    assert session.history[-2]["content"].startswith("4 ")
    assert not session.history[0]["content"].startswith("0 ")
    for reply in replies:  # each prompt left room for the whole reply
        assert reply.stats.prompt_tokens + 40 <= engine.context and reply.stats.finish_reason != "cancelled"


def test_the_chat_says_when_it_drops_turns_and_refuses_an_overlong_message(engine):
    session = ChatSession(engine, GREEDY, 40)
    status, _, err = run_repl(session, [f"{i} " + "word " * 12 for i in range(4)] + ["word " * 400, "/quit"])
    assert status == 0
    assert "(context: dropped the oldest 1 exchange(s) to fit the 256-token context)" in err
    assert "(not sent: your message takes" in err and session.replies == 4


def test_a_reply_runs_to_the_end_of_the_context_unless_a_limit_is_set(engine):
    """#18 item 8, the chat half: no silent 128-token cap; `mtpedge chat` sets no limit unless asked."""
    import argparse

    from mtpedge.chat_cmd import add_arguments

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    assert parser.parse_args([]).max_new_tokens is None
    assert parser.parse_args(["--max-new-tokens", "9"]).max_new_tokens == 9
    session = ChatSession(engine, GREEDY)
    status, out, err = run_repl(session, ["hello", "/quit"])
    stats = session.last
    # the tiny random model does not say its stop token here: the reply fills the context
    assert stats.finish_reason == "length" and stats.new_tokens > 128
    assert stats.prompt_tokens + stats.new_tokens == engine.context
    assert "(reply cut short: the context is full" in err


def test_a_message_too_long_for_the_context_is_refused(engine):
    session = ChatSession(engine, GREEDY, 8)
    session.reply("short")
    with pytest.raises(ContextFullError, match="context is 256"):
        session.reply("word " * 400)
    assert len(session.history) == 2  # the conversation is untouched


def run_repl(session: ChatSession, lines: list, out=None) -> tuple[int, str, str]:
    out = out or io.StringIO()
    err = io.StringIO()
    status = repl(session, scripted(lines), out, err)
    return status, out.getvalue(), err.getvalue()


def test_commands(engine):
    session = ChatSession(engine, GREEDY, 10)
    status, out, err = run_repl(session, ["hello", "/stats", "/drafter", "/drafter nonsense", "/drafter none",
                                          "/system Speak like a pirate", "/system", "/bogus", "/reset", "/quit",
                                          "never read"])
    assert status == 0
    assert "last reply: " in err and "session: 1 replies" in err
    assert "1.00 tokens per decode call, drafter none" in err  # plain decoding: τ = 1
    assert "drafter: none (available: none" in err
    assert "unknown drafter 'nonsense'" in err and "(drafter: none)" in err
    assert "system prompt: Speak like a pirate" in err and "unknown command /bogus" in err
    assert session.history == [] and session.system == "Speak like a pirate"


def engine_with_template(bundle, tmp_path, template: str) -> Engine:
    """An engine of a copy of `bundle` whose manifest carries another chat template."""
    folder = copy_bundle(bundle, tmp_path)
    set_chat_template(folder, template)
    return Engine.load(folder)


def test_a_message_the_template_or_the_tokenizer_refuses_is_answered_and_the_chat_goes_on(bundle, tmp_path):
    """#18 in the chat: an invalid message or a chat-template error is said, the conversation stays, the next
    message is answered (before, either one ended the session with `mtpedge: error: ...`)."""
    # a template that refuses one kind of message, as real ones refuse e.g. a system turn or two user turns in a row
    engine = engine_with_template(bundle, tmp_path, (
        "{% for m in messages %}{% if m['content'] == 'forbidden' %}{{ raise_exception('no forbidden words') }}"
        "{% endif %}{{ m['role'] + ': ' + m['content'] + '\\n' }}{% endfor %}"
        "{% if add_generation_prompt %}assistant: {% endif %}"))
    session = ChatSession(engine, GREEDY, 4)
    status, out, err = run_repl(session, ["hello", "forbidden", "bad \udcff byte", "/system \ud800",
                                          "and again", "/quit"])
    assert status == 0
    assert "(not sent: the model's chat template refused the conversation: no forbidden words)" in err
    assert "(not sent: message 2 holds a lone surrogate" in err
    assert "(the system prompt holds a lone surrogate" in err and session.system is None
    assert session.replies == 2 and [m["content"] for m in session.history[::2]] == ["hello", "and again"]
    with pytest.raises(MessageRefused, match="no forbidden words"):
        session.reply("forbidden")
    assert session.replies == 2 and len(session.history) == 4


class InterruptingOutput(io.StringIO):
    """Presses Ctrl-C (a real SIGINT to this process) when the reply's third piece is printed."""

    def __init__(self) -> None:
        super().__init__()
        self.pieces = 0

    def write(self, text: str) -> int:
        if text:
            self.pieces += 1
            if self.pieces == 3:
                signal.raise_signal(signal.SIGINT)
        return super().write(text)


def test_ctrl_c_stops_the_reply_but_not_the_session(engine):
    handler_before = signal.getsignal(signal.SIGINT)  # SIG_IGN when started in the background (CI)
    session = ChatSession(engine, GREEDY, 200)
    status, out, err = run_repl(session, ["tell me everything", "/stats", KeyboardInterrupt(), "/quit"],
                                InterruptingOutput())
    assert status == 0
    assert "(reply stopped; the part shown stays in the conversation)" in err
    assert "(input cleared" in err  # Ctrl-C at the prompt clears the line and goes on
    assert session.last.finish_reason == "cancelled" and session.last.new_tokens < 20
    assert session.history[-1]["content"] and out.startswith(session.history[-1]["content"])
    assert signal.getsignal(signal.SIGINT) is handler_before  # the handler was put back


def test_the_chat_command_end_to_end(bundle):
    script = "Hello\n/stats\n/quit\n"
    done = subprocess.run([sys.executable, "-m", "mtpedge", "chat", "--bundle", str(bundle),
                           "--max-new-tokens", "8"], input=script, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "session: 1 replies, " in done.stderr and "context: " in done.stderr


def test_a_conversation_the_template_stops_accepting_goes_on_after_a_reset(bundle, tmp_path):
    """A template that refuses a conversation only once it has grown (here: past three messages, as templates with
    a turn or length check do): /stats still answers, the refused message is said, /reset lets the chat go on."""
    engine = engine_with_template(bundle, tmp_path, (
        "{% if messages | length > 3 %}{{ raise_exception('at most three messages') }}{% endif %}"
        "{% for m in messages %}{{ m['role'] + ': ' + m['content'] + '\\n' }}{% endfor %}"
        "{% if add_generation_prompt %}assistant: {% endif %}"))
    session = ChatSession(engine, GREEDY, 4)
    status, out, err = run_repl(session, ["hello", "/stats", "again", "/stats", "third", "/reset", "fresh", "/quit"])
    assert status == 0
    assert "(not sent: the model's chat template refused the conversation: at most three messages)" in err
    assert err.count("session: ") == 2 and "context: " in err
    assert session.replies == 3 and [m["content"] for m in session.history[::2]] == ["fresh"]

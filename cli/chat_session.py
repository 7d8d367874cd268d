"""The conversation behind `mtpedge chat`: history in the chat template, context-window management, stats.

It knows nothing about terminals (chat_cmd.py does), so tests drive it directly.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from mtpedge.generate_cmd import format_stats
from mtpedge.runtime.drafters import DrafterSpec, make_drafter, parse_drafter
from mtpedge.runtime.engine import Engine
from mtpedge.runtime.generate import LOSSY_WARNING, GenerationStats, generate
from mtpedge.runtime.sampling import SamplingConfig
from mtpedge.runtime.tokenizer import StreamDecoder


@dataclass(frozen=True)
class Reply:
    text: str
    stats: GenerationStats
    dropped_exchanges: int  # oldest user/assistant pairs removed to make room
    stopped: bool  # interrupted by the user (Ctrl-C)


class MessageRefused(ValueError):
    """The message cannot be sent (the conversation is left as it was); the message says why and what to do."""


class ContextFullError(MessageRefused):
    """The newest message alone does not fit in the context."""


class ChatSession:
    """The conversation and its engine; knows nothing about terminals (the REPL below does)."""

    def __init__(self, engine: Engine, sampling: SamplingConfig, max_new_tokens: int | None = None,
                 drafter: str | DrafterSpec = "none", system: str | None = None) -> None:
        """max_new_tokens: a limit per reply; None = up to the model's stop token or the end of the context."""
        self.engine, self.sampling, self.max_new_tokens = engine, sampling, max_new_tokens
        self.system = system
        self.history: list[dict[str, str]] = []  # user, assistant, user, assistant, ...
        self.drafter_name, self.drafter = "none", None
        self.set_drafter(drafter)
        self.last: GenerationStats | None = None
        self.replies = self.tokens = self.decode_calls = 0
        self.decode_tokens = 0.0  # tokens committed by decode calls (τ x calls), as GenerationStats counts them
        self.seconds = 0.0
        self.context_tokens = 0  # the last reply's prompt and answer: what the conversation fills of the context

    def set_drafter(self, spec: str | DrafterSpec) -> str | None:
        """Switch to the drafter `spec` names; a warning to show for a lossy one. ValueError names the choices."""
        spec = parse_drafter(spec)
        drafter = make_drafter(spec, self.engine)
        if drafter is not None and drafter.lossy and not self.sampling.greedy:
            raise ValueError(f"{spec.name} is lossy and decodes greedily only (this chat samples)")
        self.drafter, self.drafter_name = drafter, str(spec)
        return LOSSY_WARNING.format(name=spec.name) if drafter is not None and drafter.lossy else None

    def reset(self) -> None:
        self.history.clear()
        self.context_tokens = 0

    def messages(self, history: list[dict[str, str]]) -> list[dict[str, str]]:
        return ([{"role": "system", "content": self.system}] if self.system else []) + history

    def _fit(self, history: list[dict[str, str]]) -> tuple[list[int], int]:
        """Prompt ids of the newest turns that leave room for a reply; (ids, exchanges dropped)."""
        encode, context = self.engine.tokenizer.encode_chat, self.engine.context
        # room kept for the reply when old turns are dropped: a long reply must not push out the whole conversation
        room = min(self.max_new_tokens or context // 4, context // 2)
        dropped, ids = 0, encode(self.messages(history))
        while len(ids) + room > context and len(history) > 1:
            del history[:2]  # the oldest user message and the reply to it
            dropped += 1
            ids = encode(self.messages(history))
        if len(ids) >= context:
            raise ContextFullError(f"your message takes {len(ids)} tokens with the chat template, but the context "
                                   f"is {context}: shorten it (or export a bundle with a larger --context)")
        return ids, dropped

    def reply(self, text: str, on_text: Callable[[str], None] = lambda _: None,
              should_stop: Callable[[], bool] = lambda: False) -> Reply:
        """The reply to `text`, streamed to on_text; MessageRefused (nothing sent, nothing changed) when the message
        cannot be put into the prompt."""
        history = [*self.history, {"role": "user", "content": text}]
        try:
            prompt_ids, dropped = self._fit(history)
        except ContextFullError:
            raise
        except ValueError as err:  # the chat template refused the conversation, or the text is not valid Unicode
            raise MessageRefused(str(err)) from err
        tok = self.engine.tokenizer
        stream = StreamDecoder(tok)
        limit = self.engine.context - len(prompt_ids)  # to the end of the context, unless a limit is set
        result = generate(self.engine, prompt_ids, min(self.max_new_tokens or limit, limit),
                          self.sampling, drafter=self.drafter, on_overflow="stop", should_stop=should_stop,
                          on_tokens=lambda ids: on_text(stream.push(ids)))
        answer = tok.decode(result.token_ids)
        if answer.startswith(stream.text) and len(answer) > len(stream.text):
            on_text(answer[len(stream.text):])  # an unfinished UTF-8 sequence the stream held back at the end
        self.history = [*history, {"role": "assistant", "content": answer}]
        stats = result.stats
        self.last = stats
        self.context_tokens = len(prompt_ids) + stats.new_tokens
        self.replies += 1
        self.tokens += stats.new_tokens
        self.decode_calls += stats.decode_calls
        self.decode_tokens += stats.tokens_per_call * stats.decode_calls
        self.seconds += stats.elapsed_seconds
        return Reply(answer, stats, dropped, stats.finish_reason == "cancelled")

    def context_used(self) -> int:
        # counted, not rendered again: a template may refuse the history as it stands (ending with a reply)
        return self.context_tokens

    def stats_report(self) -> str:
        lines = [f"last reply: {format_stats(self.last.to_dict())}" if self.last else "last reply: none yet"]
        per_call = self.decode_tokens / self.decode_calls if self.decode_calls else 1.0
        lines.append(f"session: {self.replies} replies, {self.tokens} tokens in {self.seconds:.1f} s, "
                     f"{per_call:.2f} tokens per decode call, drafter {self.drafter_name}")
        lines.append(f"context: {self.context_used()} of {self.engine.context} tokens used by "
                     f"{len(self.history) // 2} exchanges")
        return "\n".join(lines)

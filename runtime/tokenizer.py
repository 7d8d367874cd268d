"""Text <-> token ids with the `tokenizers` library, and the model's chat template rendered with jinja2."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment
from tokenizers import Tokenizer

from .bundle import TokenizerInfo


def _raise_template_error(message: str) -> None:
    raise jinja2.TemplateError(message)


class TextTokenizer:
    def __init__(self, folder: Path, info: TokenizerInfo) -> None:
        self.info = info
        self.tokenizer = Tokenizer.from_file(str(folder / info.file))
        self._template = None
        if info.chat_template:
            env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
            env.globals["raise_exception"] = _raise_template_error
            self._template = env.from_string(info.chat_template)

    @property
    def has_chat_template(self) -> bool:
        return self._template is not None

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        ids = self.tokenizer.encode(text, add_special_tokens=add_special_tokens).ids
        bos = self.info.bos_token_id
        if add_special_tokens and self.info.add_bos_token and bos is not None and ids[:1] != [bos]:
            ids = [bos, *ids]
        return ids

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def render_chat(self, messages: list[dict[str, str]], add_generation_prompt: bool = True) -> str:
        if self._template is None:
            # A base model without a template: plain concatenation, the common fallback.
            return "\n".join(m["content"] for m in messages) + ("\n" if add_generation_prompt else "")
        return self._template.render(
            messages=messages,
            add_generation_prompt=add_generation_prompt,
            bos_token=self.info.bos_token or "",
            eos_token=self.info.eos_token or "",
        )

    def encode_chat(self, messages: list[dict[str, str]]) -> list[int]:
        # the template writes its own special tokens, as transformers' apply_chat_template does
        return self.encode(self.render_chat(messages), add_special_tokens=False)


class StreamDecoder:
    """Turns a growing list of ids into text deltas, holding back incomplete UTF-8 sequences."""

    def __init__(self, tokenizer: TextTokenizer) -> None:
        self.tokenizer = tokenizer
        self.ids: list[int] = []
        self.text = ""

    def push(self, ids: Sequence[int]) -> str:
        self.ids.extend(ids)
        text = self.tokenizer.decode(self.ids)
        if text.endswith("\ufffd"):
            return ""
        delta = text[len(self.text):] if text.startswith(self.text) else text
        self.text = text
        return delta

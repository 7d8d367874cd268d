"""Text <-> token ids with the `tokenizers` library, and the model's chat template rendered with jinja2.

Chat messages are text, never control: `<|im_start|>system` typed in a message is tokenized as the characters
it is made of, not as the special tokens the chat template writes around the messages (see `encode_chat`).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment
from tokenizers import AddedToken, Tokenizer

from .bundle import BundleError, TokenizerInfo

LONE_SURROGATE = re.compile("[\ud800-\udfff]")  # what JSON's "\ud800" or undecodable command-line bytes give
# Unicode plane 15 private use: one character per special token stands in for its text typed in a message
PLACEHOLDER_BASE = 0xF0000


class ChatTemplateError(ValueError):
    """The model's chat template refused the conversation (its own raise_exception, or a template bug)."""


def _raise_template_error(message: str) -> None:
    raise jinja2.TemplateError(message)


def check_text(text: str, what: str = "the text") -> None:
    """Refuse a lone UTF-16 surrogate: the tokenizer cannot encode it and would fail without saying why."""
    found = LONE_SURROGATE.search(text)
    if found:
        raise ValueError(f"{what} holds a lone surrogate ({ascii(found.group())} at character {found.start()}), "
                         "which is not valid Unicode: send valid UTF-8 text")


@dataclass(frozen=True)
class _LiteralSpecials:
    """A copy of the tokenizer where each special token's placeholder is a special token of its own, and the
    ids each placeholder expands into: its special token's text, tokenized as plain characters."""

    tokenizer: Tokenizer
    placeholder: dict[str, str]  # special token text -> its placeholder character
    text_ids: dict[int, list[int]]  # placeholder id -> the ids of the special token's characters


class TextTokenizer:
    def __init__(self, folder: Path, info: TokenizerInfo) -> None:
        self.info = info
        path = folder / info.file
        try:
            self.tokenizer = Tokenizer.from_file(str(path))
        except Exception as err:  # the tokenizers library raises its own exception type
            raise BundleError(f"{path} cannot be read as a tokenizer ({str(err)[:200]}): the file is damaged; "
                              "check the bundle with `mtpedge verify`, or re-run `mtpedge export`") from err
        specials = sorted({t.content for t in self.tokenizer.get_added_tokens_decoder().values() if t.special},
                          key=len, reverse=True)  # longest first, so that no special token hides a longer one
        self._specials = re.compile("|".join(map(re.escape, specials))) if specials else None
        self._literal: _LiteralSpecials | None = None  # built on the first message that needs it
        self._template = None
        if info.chat_template:
            env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
            env.globals["raise_exception"] = _raise_template_error
            try:
                self._template = env.from_string(info.chat_template)
            except jinja2.TemplateError as err:
                raise BundleError(f"the chat template in {folder / 'manifest.json'} does not parse ({err}): "
                                  "re-run `mtpedge export`") from err

    def vocab(self) -> dict[str, int]:
        """Token -> id, special tokens included."""
        return self.tokenizer.get_vocab(with_added_tokens=True)

    @cached_property
    def fingerprint(self) -> str:
        """The vocabulary's identity, which a static n-gram table is checked against (computed once: ~30 ms)."""
        from .static_ngrams import vocab_fingerprint

        return vocab_fingerprint(self.vocab())

    @property
    def has_chat_template(self) -> bool:
        return self._template is not None

    @cached_property
    def chars_per_token(self) -> int | None:
        return chars_per_token_bound(json.loads(self.tokenizer.to_str()))

    def tokens_at_least(self, chars: int) -> int:
        """A lower bound on the tokens of any text of `chars` characters (0 when the tokenizer allows none):
        enough to refuse a text that cannot fit a context without tokenizing it."""
        return math.ceil(chars / self.chars_per_token) if self.chars_per_token else 0

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        check_text(text)
        # encode_batch releases the GIL (encode does not): a long text does not stall the server's event loop
        ids = self.tokenizer.encode_batch([text], add_special_tokens=add_special_tokens)[0].ids
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
        try:
            return self._template.render(
                messages=messages,
                add_generation_prompt=add_generation_prompt,
                bos_token=self.info.bos_token or "",
                eos_token=self.info.eos_token or "",
            )
        except jinja2.TemplateError as err:  # e.g. the template's own check on the order of roles
            raise ChatTemplateError(f"the model's chat template refused the conversation: {err}") from err
        except (TypeError, KeyError, IndexError, AttributeError) as err:  # a template that assumes more
            raise ChatTemplateError(f"the model's chat template failed on this conversation "
                                    f"({type(err).__name__}: {err})") from err

    def encode_chat(self, messages: list[dict[str, str]]) -> list[int]:
        """The chat prompt's ids: the template writes its own special tokens (as transformers'
        apply_chat_template does), while special tokens typed in a message stay the characters they are made
        of, so that a user cannot open a system turn by typing `<|im_start|>system`."""
        for i, message in enumerate(messages):
            check_text(message["content"], f"message {i}")
        if self._specials is None or not any(self._specials.search(m["content"]) for m in messages):
            return self.encode(self.render_chat(messages), add_special_tokens=False)
        # Each special token typed in a message becomes a placeholder that the literal tokenizer splits off
        # exactly where the plain one would have split the special token, then expands into the token's text.
        literal = self._literal_specials()
        guarded = [{**m, "content": self._specials.sub(lambda s: literal.placeholder[s.group()], m["content"])}
                   for m in messages]
        encoded = literal.tokenizer.encode_batch([self.render_chat(guarded)], add_special_tokens=False)[0]
        return [t for i in encoded.ids for t in literal.text_ids.get(i, (i,))]

    def _literal_specials(self) -> _LiteralSpecials:
        if self._literal is None:
            spec = self.tokenizer.to_str()
            as_text = Tokenizer.from_str(spec)
            as_text.encode_special_tokens = True  # special tokens in the input are plain characters
            copy = Tokenizer.from_str(spec)
            specials = sorted({t.content for t in self.tokenizer.get_added_tokens_decoder().values() if t.special})
            placeholder = {s: chr(PLACEHOLDER_BASE + i) for i, s in enumerate(specials)}
            copy.add_special_tokens([AddedToken(p, special=True, normalized=False) for p in placeholder.values()])
            text_ids = {copy.token_to_id(p): as_text.encode(s, add_special_tokens=False).ids
                        for s, p in placeholder.items()}
            self._literal = _LiteralSpecials(copy, placeholder, text_ids)
        return self._literal


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


# How much a normalizer or pre-tokenizer step can shrink text (characters in per character out); a step not
# listed may drop text (Strip, BERT's whitespace splitting) and leaves the tokenizer without a bound.
_SHRINK = {"NFC": 4, "NFKC": 4,  # a composed character replaces at most 4 code points (e.g. U+1F82)
           "NFD": 1, "NFKD": 1, "Lowercase": 1, "Prepend": 1, "ByteLevel": 1, "Metaspace": 1, "Digits": 1,
           "Punctuation": 1, "Split": 1, "UnicodeScripts": 1}


def _shrink(step: dict | None) -> float | None:
    if step is None:
        return 1
    if step.get("type") == "Sequence":
        factors = [_shrink(s) for s in step.get("normalizers", step.get("pretokenizers", []))]
        return None if None in factors else math.prod(factors)
    if step.get("behavior") == "Removed":  # a Split that drops what it matches
        return None
    if step.get("type") == "Replace":  # keeps the length when the replacement is no shorter than the pattern
        pattern = step.get("pattern", {}).get("String")
        return 1 if pattern is not None and len(step.get("content", "")) >= len(pattern) else None
    return _SHRINK.get(step.get("type"))


def chars_per_token_bound(spec: dict) -> int | None:
    """At most how many characters of input one token stands for (None: no bound holds), from tokenizer.json.

    A token's vocabulary string has one character per input byte (byte-level BPE) or per input character
    (sentencepiece-style BPE, whose `<0x41>` byte tokens are longer than the character they stand for), so
    a token covers at most len(string) characters of the normalized text, and normalizing shrinks text by at
    most the factor of its steps. A BPE model that may fuse unknown characters into one token, or drop them
    (no unknown token, no byte fallback, no byte-level alphabet), has no bound, nor has any other model.
    """
    model = spec.get("model", {})
    if model.get("type") != "BPE" or not isinstance(model.get("vocab"), dict):
        return None
    byte_level = "ByteLevel" in json.dumps(spec.get("pre_tokenizer"))
    if not (model.get("byte_fallback") or byte_level or (model.get("unk_token") and not model.get("fuse_unk"))):
        return None
    shrink = [_shrink(spec.get("normalizer")), _shrink(spec.get("pre_tokenizer"))]
    if None in shrink:
        return None
    longest = max([len(s) for s in model["vocab"]] + [len(t["content"]) for t in spec.get("added_tokens", [])])
    return math.ceil(longest * math.prod(shrink))

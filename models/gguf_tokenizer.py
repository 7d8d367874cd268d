"""The byte-level BPE tokenizer a GGUF file describes, built from its metadata as transformers builds it.

A GGUF carries no tokenizer.json: its vocabulary, merges, token types, special ids and chat template are
metadata under llama.cpp's names. Built here from `GGUFFile.metadata` (parsed once) instead of through
`AutoTokenizer.from_pretrained(gguf_file=...)`, which re-parses the file; tests/test_gguf_loading.py holds
the two to the same ids, text and chat prompts.
"""

from __future__ import annotations

from typing import Any

from tokenizers import AddedToken, Regex, pre_tokenizers
from transformers import GPT2Tokenizer, PreTrainedTokenizerFast

from .gguf_file import GGUFFile

CONTROL, USER_DEFINED = 3, 4  # llama.cpp's token types

# Split rules by `tokenizer.ggml.pre` that differ from GPT-2's own (ByteLevel's built-in regex); a pre-tokenizer
# named here or in BYTE_LEVEL_DEFAULT is supported, any other goes through transformers.
QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
               r"|\s*[\r\n]+|\s+(?!\S)|\s+")
SPLITS = {"qwen2": QWEN2_SPLIT}
BYTE_LEVEL_DEFAULT = {"smollm", "gpt2", "default"}


BYTE_LEVEL_MODEL = "gpt2"  # llama.cpp's name for byte-level BPE (GPT-2, SmolLM, Qwen, Llama 3)


def unsupported_reason(gguf: GGUFFile) -> str | None:
    """Why `tokenizer_from_gguf` cannot build this file's tokenizer (transformers then does), or None."""
    model = gguf.metadata.get("tokenizer.ggml.model")
    if model != BYTE_LEVEL_MODEL:
        return f"tokenizer {model!r}"
    pre = gguf.metadata.get("tokenizer.ggml.pre", "default")
    return None if pre in SPLITS or pre in BYTE_LEVEL_DEFAULT else f"pre-tokenizer {pre!r}"


def _byte_spelling() -> dict[int, str]:
    """GPT-2's printable spelling of each byte: printable Latin-1 bytes stand for themselves, the other 68
    are shifted past 255 in order."""
    kept = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    spelling = {b: chr(b) for b in kept}
    for shift, b in enumerate(b for b in range(256) if b not in spelling):
        spelling[b] = chr(256 + shift)
    return spelling


def tokenizer_from_gguf(gguf: GGUFFile) -> Any:
    """A transformers fast tokenizer equal to the one transformers builds from this file."""
    meta = gguf.metadata
    tokens: list[str] = meta["tokenizer.ggml.tokens"]
    types: list[int] = meta.get("tokenizer.ggml.token_type") or [1] * len(tokens)
    if len(types) != len(tokens):
        raise ValueError(f"tokenizer.ggml.token_type has {len(types)} entries for {len(tokens)} tokens")
    spelling = _byte_spelling()
    alphabet = set(spelling.values())
    vocab = {tok if set(tok) <= alphabet else "".join(spelling[b] for b in tok.encode("utf-8")): i
             for i, tok in enumerate(tokens)}

    def token(key: str) -> str | None:
        index = meta.get(f"tokenizer.ggml.{key}")
        return tokens[index] if index is not None and 0 <= index < len(tokens) else None

    special = {"unk_token": token("unknown_token_id"), "bos_token": token("bos_token_id"),
               "eos_token": token("eos_token_id"), "pad_token": token("padding_token_id")}
    # GPT2Tokenizer assembles the byte-level BPE backend; the file's own tokens and split rule go on top
    builder = GPT2Tokenizer(vocab=vocab, merges=[tuple(m.split(" ")) for m in meta.get("tokenizer.ggml.merges", [])],
                            **special)
    # control tokens (<|im_start|>) are special and stay whole; one spelled outside the byte alphabet is a
    # llama.cpp mislabel that would grow the vocabulary past the model's, so it is left out
    control = [AddedToken(t, normalized=False, special=True) for t, kind in zip(tokens, types, strict=True)
               if kind == CONTROL and set(t) <= alphabet]
    if control:
        builder.add_special_tokens({"additional_special_tokens": control}, replace_extra_special_tokens=False)
    known = builder.get_vocab()
    user = [AddedToken(t, normalized=False, special=False) for t, kind in zip(tokens, types, strict=True)
            if kind == USER_DEFINED and t in known]
    if user:
        builder.add_tokens(user)
    backend = builder.backend_tokenizer
    split = SPLITS.get(meta.get("tokenizer.ggml.pre", "default"))
    if split is not None:
        backend.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(split), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    # the wrapper transformers returns for a GGUF: the backend, the four named tokens and the chat template
    return PreTrainedTokenizerFast(
        tokenizer_object=backend, chat_template=meta.get("tokenizer.chat_template"),
        add_bos_token=bool(meta.get("tokenizer.ggml.add_bos_token", False)),
        add_eos_token=bool(meta.get("tokenizer.ggml.add_eos_token", False)), **special)

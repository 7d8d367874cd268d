"""A static n-gram table: after each n-gram of a corpus, the token that most often followed it.

Prompt lookup drafts only where the context repeats itself. A small model's answers also repeat each other: the
same openings, list markup and stock phrases come back answer after answer. A table built from the model's own
answers to other prompts (the self-distilled data, `mtpedge train-ngrams`) drafts there too. Its drafts are
verified like any other, so a table never changes the output, only how many tokens a call commits.

The table is an .npz without pickled objects: `keys` (uint64, sorted: a 64-bit FNV-1a hash of the n-gram and its
length), `next_ids` (int32: the token that followed it most often), `orders` (the n-gram lengths it holds) and
`vocab` (the fingerprint of the tokenizer whose ids it holds, `vocab_fingerprint`). A hash collision can only
propose a wrong draft, which verification rejects.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .atomic_npz import save_npz

FORMAT = "mtpedge-static-ngrams"
VERSION = 1
SHIPPED_DIR = Path(__file__).parent / "data"  # tables for the default model, found by their tokenizer
# a bundle whose tokenizer has a shipped table holds a copy (export), named in its manifest's extras: the
# Android engine reads it from there
EXTRAS_KEY = "static_ngrams"
BUNDLE_FILE = "static_ngrams.npz"

_FNV_OFFSET = 0xCBF29CE484222325
_FNV_PRIME = 0x100000001B3
_MASK = (1 << 64) - 1


class StaticNgramsError(ValueError):
    """A static n-gram file that cannot be used: the message names the file, the problem and the fix."""


def ngram_key(tokens: Sequence[int]) -> int:
    """The table key of one n-gram: FNV-1a over its length and its token ids, 64 bits."""
    key = _FNV_OFFSET ^ len(tokens)
    for token in tokens:
        key = ((key ^ int(token)) * _FNV_PRIME) & _MASK
    return key


def ngram_keys(windows: np.ndarray) -> np.ndarray:
    """`ngram_key` of every row of a (rows, n) array of token ids, vectorized (uint64 arithmetic wraps)."""
    keys = np.full(windows.shape[0], _FNV_OFFSET ^ windows.shape[1], dtype=np.uint64)
    with np.errstate(over="ignore"):
        for column in windows.T.astype(np.uint64):
            keys = (keys ^ column) * np.uint64(_FNV_PRIME)
    return keys


def vocab_fingerprint(vocab: dict[str, int]) -> str:
    """A tokenizer's identity for the table: sha256 of its tokens in id order (12 hex digits)."""
    ordered = "\n".join(token for token, _ in sorted(vocab.items(), key=lambda item: item[1]))
    return hashlib.sha256(ordered.encode("utf-8", "surrogatepass")).hexdigest()[:12]


@dataclass(frozen=True)
class StaticNgrams:
    keys: np.ndarray  # uint64, sorted
    next_ids: np.ndarray  # int32, one per key
    orders: tuple[int, ...]  # n-gram lengths held, longest first
    vocab: str  # vocab_fingerprint of the tokenizer the ids belong to

    def next_token(self, context: Sequence[int]) -> tuple[int, int]:
        """(n, token): the longest n-gram ending the context that the table holds, and the token that followed
        it most often; (0, -1) if none."""
        for n in self.orders:
            if len(context) < n:
                continue
            key = np.uint64(ngram_key(context[-n:]))
            at = int(np.searchsorted(self.keys, key))
            if at < self.keys.size and self.keys[at] == key:
                return n, int(self.next_ids[at])
        return 0, -1

    def chain(self, context: Sequence[int], length: int) -> tuple[int, np.ndarray]:
        """(n, tokens): up to `length` tokens, each the table's next token after the context and the tokens
        before it; n is the first token's matched n-gram length (0 and no tokens: no match)."""
        longest = self.orders[0]
        extended = list(context[-longest:])
        first, tokens = 0, []
        while len(tokens) < length:
            n, token = self.next_token(extended)
            if n == 0:
                break
            first = first or n
            tokens.append(token)
            extended = (extended + [token])[-longest:]
        return first, np.asarray(tokens, dtype=np.int64)

    def save(self, path: str | Path) -> None:
        """Write atomically (atomic_npz.save_npz), compressed."""
        save_npz(path, {"format": np.array(FORMAT), "version": np.array(VERSION), "keys": self.keys,
                        "next_ids": self.next_ids, "orders": np.asarray(self.orders, dtype=np.int64),
                        "vocab": np.array(self.vocab)}, compressed=True)

    @classmethod
    def load(cls, path: str | Path, vocab_size: int | None = None) -> StaticNgrams:
        """Read and check a table (never unpickles). `vocab_size`: the ids must be below it."""
        path = Path(path)
        fix = "rebuild it with `mtpedge train-ngrams`"
        try:
            with np.load(path, allow_pickle=False) as data:
                fields = {name: data[name] for name in ("format", "version", "keys", "next_ids", "orders", "vocab")}
        except FileNotFoundError as err:
            raise StaticNgramsError(f"no static n-gram table at {path}: {fix}, or pass static=none") from err
        except (OSError, ValueError, KeyError) as err:
            raise StaticNgramsError(f"{path} is not a static n-gram table ({str(err)[:120]}): {fix}") from err
        if str(fields["format"]) != FORMAT or int(fields["version"]) != VERSION:
            raise StaticNgramsError(f"{path} is not a version-{VERSION} {FORMAT} file (format {fields['format']}, "
                                    f"version {fields['version']}): {fix}")
        keys, next_ids, orders = fields["keys"], fields["next_ids"], fields["orders"]
        problem = None
        if keys.dtype != np.uint64 or next_ids.dtype != np.int32 or keys.shape != next_ids.shape or keys.ndim != 1:
            problem = "keys and next ids differ in type or length"
        elif keys.size > 1 and not (keys[1:] > keys[:-1]).all():
            problem = "its keys are not sorted and unique"
        elif orders.ndim != 1 or orders.size == 0 or orders.min() < 1:
            problem = f"bad n-gram orders {orders.tolist()}"
        elif next_ids.size and next_ids.min() < 0:
            problem = "negative token ids"
        if problem:
            raise StaticNgramsError(f"{path} is damaged ({problem}): {fix}")
        table = cls(keys, next_ids, tuple(sorted(orders.tolist(), reverse=True)), str(fields["vocab"]))
        if vocab_size is not None:
            table.check_ids(vocab_size, path)
        return table

    def check_ids(self, vocab_size: int, path: str | Path) -> None:
        if self.next_ids.size and self.next_ids.max() >= vocab_size:
            raise StaticNgramsError(f"{path} is damaged (token ids outside the vocabulary of {vocab_size}): rebuild "
                                    "it with `mtpedge train-ngrams`")


def _shipped(fingerprint: str) -> tuple[Path, StaticNgrams] | None:
    """The table shipped for the tokenizer with this fingerprint (the default model's), and its file, if any."""
    for path in sorted(SHIPPED_DIR.glob("*-ngrams.npz")):
        table = StaticNgrams.load(path)
        if table.vocab == fingerprint:
            return path, table
    return None


def shipped_file(fingerprint: str) -> Path | None:
    found = _shipped(fingerprint)
    return None if found is None else found[0]


def shipped_table(fingerprint: str, vocab_size: int) -> StaticNgrams | None:
    found = _shipped(fingerprint)  # read once: the file is the whole table
    if found is None:
        return None
    path, table = found
    table.check_ids(vocab_size, path)
    return table

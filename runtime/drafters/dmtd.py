"""DMTD drafters (direct multi-token decoding, arXiv:2510.11958) on a DMTD bundle, in the shared decode loop.

The base model's L layers are "thinking" layers [0, L - D) and D decoding layers; a trained copy of the
decoding layers decodes from a token's embedding alone between cycle heads, and from emb + the thinking hidden
state h at a head (models/dmtd.py). A DMTD bundle (export/dmtd_bundle.py) holds:
    the base model's graphs, with h as one more output (`layer_hidden`) of every call;
    the copy as a D-layer decoder graph of the ordinary contract (`copy_graphs`), run by an Engine of its own:
    the same block runner, attention bias, RoPE tables and graph I/O check as the main engine, and the copy's
    own KV cache.

Why this cut: the loop's one call per step already runs the thinking layers over the tree's tokens, so tapping
their output costs nothing, and verification is the base model's own full graph, the one plain decoding runs:
dmtd-spec is lossless by construction. The copy's KV is the only extra state, and only the copy needs it. (The
lossy mode pays for it: a head call runs all L layers where the paper's inference runs only the thinking ones.)

    dmtd-spec (LOSSLESS)  each step the copy drafts a chain of `draft_len` tokens after the root (its input: the
                          root's embedding alone); the loop verifies the chain with the base model. The accepted
                          tokens' emb + h then enter the copy's KV as heads, in the call that drafts the next chain.
    dmtd (LOSSY)          the paper's inference with cyclic refilling: from the prompt's last position on, every
                          τ-th position is a head. A step's chain is the τ tokens up to the next head, drafted by
                          the copy from embeddings alone; the loop's call runs them through the base graph (which
                          refills the thinking layers' KV and gives h at the head), and the copy's logits at the
                          head (emb + h) choose the next root. The loop verifies against these logits
                          (`own_logits`): the output is the DMTD model's, not the base model's. It equals the
                          training-time gated pass token for token (tests/test_dmtd_runtime.py).

Graph time of the copy's calls counts as host time in the stats (the loop times the main engine's calls).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from ..bundle import BundleError, GraphEntry
from ..contract import LAYER_HIDDEN
from ..tree import DraftTree
from .base import Drafter, option

if TYPE_CHECKING:
    from ..engine import Engine
    from ..graphs import GraphOutput

HOW_TO_MAKE = "make one with `mtpedge train-dmtd ... --export-bundle DIR` (or `--steps 0 --resume` from a checkpoint)"


def copy_engine(engine: Engine) -> Engine:
    """An Engine over the DMTD bundle's copy graphs (D layers, its own KV cache); BundleError if there are none."""
    from ..engine import Engine

    info = engine.manifest.extras.get("dmtd")
    if not info:
        raise BundleError(f"{engine.folder} is not a DMTD bundle (no decoding copy): {HOW_TO_MAKE}")
    thinking = int(info["thinking_layers"])
    if "copy_graphs" not in info or engine.manifest.extras.get(LAYER_HIDDEN) != thinking:
        raise BundleError(f"{engine.folder} is a DMTD bundle of an older mtpedge (part graphs, no tapped hidden "
                          f"state): re-export it, {HOW_TO_MAKE}")
    manifest = engine.manifest
    copy = replace(manifest, config=replace(manifest.config, num_layers=int(info["decoding_layers"])),
                   graphs=[GraphEntry(**g) for g in info["copy_graphs"]], extras={})
    graphs = engine.graphs
    return Engine(engine.folder, copy, graphs.threads, graphs.providers, graphs.session_options)


class CopyDrafter(Drafter):
    """What both DMTD modes share: the copy's engine, and its KV over the prompt (every prompt position a head)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.copy = copy_engine(engine)
        self.decoding_layers = int(engine.manifest.extras["dmtd"]["decoding_layers"])
        self._prompt = np.zeros(0, dtype=np.int64)
        self._prompt_logits: np.ndarray | None = None  # lossy: the copy's logits of the last prompt chunk

    def start(self, engine: Engine, prompt_ids: Sequence[int]) -> None:
        self.copy.reset()
        self._prompt = np.asarray(prompt_ids, dtype=np.int64)

    def observe_prefill(self, out: GraphOutput) -> None:
        n_past = self.copy.cache.n_past
        tokens = self._prompt[n_past: n_past + out.logits.shape[0]]
        logits = self.run_copy(self.engine.embed(tokens) + out.layer_hidden)
        self._prompt_logits = logits if self.lossy else None

    def run_copy(self, rows: np.ndarray) -> np.ndarray:
        """Run and commit a chain of input rows through the copy; their logits."""
        out = self.copy.run_block(rows, np.arange(-1, rows.shape[0] - 1))
        self.copy.cache.commit_accepted_kv(out.new_keys, out.new_values, np.arange(rows.shape[0]))
        return out.logits


@dataclass(frozen=True)
class DmtdSpecOptions:
    draft_len: int = option(3, "tokens the copy drafts per step (0 = plain decoding)")

    def __post_init__(self) -> None:
        if self.draft_len < 0:
            raise ValueError(f"draft_len must be >= 0, got {self.draft_len}")


class DmtdSpecDrafter(CopyDrafter):
    """self-speculative DMTD: a DMTD bundle's trained late-layer copy drafts, the base model verifies"""

    name = "dmtd-spec"
    Options = DmtdSpecOptions

    def __init__(self, engine: Engine, options: DmtdSpecOptions) -> None:
        super().__init__(engine)
        self.draft_len = options.draft_len
        # a step's copy call holds the last accepted path (at most draft_len + 1 heads) and the root
        widest = min(engine.graphs.max_width - 1, self.copy.graphs.max_width - 2)
        if self.draft_len > widest:
            raise ValueError(f"draft_len must be in [0, {widest}] for this bundle's graph widths, got {self.draft_len}")
        self.settings = {"drafter": self.name, "draft_len": self.draft_len, "decoding_layers": self.decoding_layers,
                         "lossy": False}
        self._heads = np.zeros((0, engine.config.hidden_size), dtype=np.float32)  # verified rows not yet in the copy

    def start(self, engine: Engine, prompt_ids: Sequence[int]) -> None:
        super().start(engine, prompt_ids)
        self._heads = self._heads[:0]

    def observe_prefill(self, out: GraphOutput) -> None:
        if self.draft_len:
            super().observe_prefill(out)

    def propose(self, context_ids: Sequence[int], root: int) -> tuple[DraftTree, None]:
        drafts = min(self.draft_len, self.engine.cache.free - 1)  # every draft's position must fit the context
        tokens = [root]
        if drafts > 0:
            embed = self.engine.embed
            # one call: the last verified tokens as heads (kept) + the root from its embedding alone (dropped below)
            logits = self.run_copy(np.concatenate([self._heads, embed(np.array([root]))]))
            tokens.append(int(np.argmax(logits[-1])))
            for _ in range(drafts - 1):
                tokens.append(int(np.argmax(self.run_copy(embed(np.array(tokens[-1:])))[0])))
            self.copy.cache.truncate(self.engine.cache.n_past)  # keep the heads, up to the root's position
            self._heads = self._heads[:0]
        return DraftTree(np.asarray(tokens), np.arange(-1, len(tokens) - 1)), None

    def observe(self, tree: DraftTree, out: GraphOutput, path: list[int]) -> None:
        if self.draft_len:  # the accepted tokens become heads: emb + the thinking layers' output
            self._heads = np.concatenate([self._heads, self.engine.embed(tree.tokens[path]) + out.layer_hidden[path]])


@dataclass(frozen=True)
class DmtdOptions:
    tau: int = option(4, "cycle length τ: one head (which sees the thinking layers) every τ tokens")

    def __post_init__(self) -> None:
        if self.tau < 1:
            raise ValueError(f"the cycle τ must be >= 1, got {self.tau}")


class DmtdDrafter(CopyDrafter):
    """DMTD's direct decoding with cyclic refilling: the late-layer copy decodes between heads, unverified"""

    name = "dmtd"
    Options = DmtdOptions
    lossy = True

    def __init__(self, engine: Engine, options: DmtdOptions) -> None:
        super().__init__(engine)
        self.tau = options.tau
        if self.tau > engine.graphs.max_width:
            raise ValueError(f"τ must be in [1, {engine.graphs.max_width}] for this bundle's graph widths, "
                             f"got {self.tau}")
        self.settings = {"drafter": self.name, "tau": self.tau, "decoding_layers": self.decoding_layers,
                         "lossy": True}
        self._anchor = 0  # the prompt's last position: the first head
        self._chain: list[int] = []
        self._chain_logits: list[np.ndarray] = []

    def start(self, engine: Engine, prompt_ids: Sequence[int]) -> None:
        super().start(engine, prompt_ids)
        self._anchor = len(prompt_ids) - 1

    def propose(self, context_ids: Sequence[int], root: int) -> tuple[DraftTree, None]:
        """The chain from the root up to the next head (or to the end of the context), drafted from embeddings."""
        length = min(self.tau, self.engine.cache.free)
        tokens = self._chain = [root]
        self._chain_logits = []
        for _ in range(length - 1):  # positions between heads: the copy sees the embedding alone
            self._chain_logits.append(self.run_copy(self.engine.embed(np.array(tokens[-1:])))[0])
            tokens.append(int(np.argmax(self._chain_logits[-1])))
        return DraftTree(np.asarray(tokens), np.arange(-1, len(tokens) - 1)), None

    def own_logits(self, out: GraphOutput) -> np.ndarray:
        if self._prompt_logits is not None:  # the prompt's last chunk: the copy ran it in observe_prefill
            logits, self._prompt_logits = self._prompt_logits, None
            return logits
        position = self.copy.cache.n_past  # of the chain's last token
        row = self.engine.embed(np.array(self._chain[-1:]))
        if (position - self._anchor) % self.tau == 0:  # a cycle head: the copy also sees the thinking layers
            row = row + out.layer_hidden[-1:]
        return np.stack([*self._chain_logits, self.run_copy(row)[0]])

"""DMTD drafters (direct multi-token decoding, arXiv:2510.11958) on a DMTD bundle, in the shared decode loop.

The DMTD model (models/dmtd.py) is a trained copy of the base model's last m + D layers: m thinking layers that
refill from the base's tapped states, then D decoding layers that take the thinking copy's output at a cycle
head and a token's embedding alone elsewhere. A DMTD bundle (export/dmtd_bundle.py) holds:
    the base model's graphs, with the residual stream entering the copy's first layer as one more output
    (`layer_hidden`) of every call;
    the copy's graphs, each set run by an Engine of its own (same block runner, bias, RoPE and I/O check as
    the main engine, its own KV cache): `think` (m layers, headless), `decode` (D layers + the LM head) and
    `draft` (the same D layers scoring a shortlist of tokens).

Every position before the current cycle is a head in the copy's KV (full refill: models/dmtd.py), and the loop's
one call per step already runs the base graph over the step's tokens, which gives their tapped states for free.

    dmtd-spec (LOSSLESS)  the tokens the last call verified enter the copy as heads (thinking copy, then the
                          draft graph), and in the same draft call the root, from its embedding alone, drafts the
                          first token; `draft_len - 1` one-row calls draft the rest of the chain, and the
                          lookup chain of the context and the drafts continues it where that pays for the wider
                          call. The base graph verifies the chain: the output is the base model's, whatever the
                          drafts. A step whose prompt-lookup chain promises more tokens per second verifies that
                          chain instead and skips the copy (lookup_or_copy.py); its tokens enter the copy at the
                          next copy step. Chains, not trees: a sibling's row is not plain decoding's, so a second
                          choice of the copy would count only through the loop's carried drafts, whose rows the
                          copy never sees as heads.
    dmtd (LOSSY)          the paper's inference: from the prompt's last position on, every τ-th position is a
                          head. A step's chain is the τ tokens up to the next head, drafted from embeddings; the
                          loop's call runs them through the base graph (their tapped states), the copy re-runs
                          them as heads (refill), and the copy's logits at the head choose the next root. The loop
                          takes these logits in place of the model's (`own_logits`): the output is the DMTD
                          model's, which equals the training-time gated pass token for token
                          (tests/test_dmtd_runtime.py).

Graph time of the copy's calls counts as host time in the stats (the loop times the main engine's calls).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from ..bundle import BundleError, GraphEntry, bundle_file
from ..contract import LAYER_HIDDEN
from ..tree import DraftTree
from ..tree_build import softmax_rows
from .base import Drafter, option
from .lookup import STATIC_HELP, static_table
from .lookup_or_copy import LookupOrCopy

if TYPE_CHECKING:
    from ..engine import Engine
    from ..graphs import GraphOutput

HOW_TO_MAKE = ("the default model's comes with `--drafter dmtd-spec` / `dmtd` and no --bundle; for another model "
               "`mtpedge train-dmtd ... --export-bundle DIR`")


def copy_engine(engine: Engine, kind: str) -> Engine | None:
    """An Engine over one set of the DMTD bundle's copy graphs (`think`, `decode` or `draft`), None for a thinking
    copy of no layers; BundleError if the bundle has none."""
    from ..engine import Engine

    info = engine.manifest.extras.get("dmtd")
    if not info:
        raise BundleError(f"{engine.folder} is not a DMTD bundle (no trained copy): {HOW_TO_MAKE}")
    if "decode_graphs" not in info or engine.manifest.extras.get(LAYER_HIDDEN) != info.get("tap_layer"):
        raise BundleError(f"{engine.folder} is a DMTD bundle of an older mtpedge (an untrained-thinking copy): "
                          f"re-export it; {HOW_TO_MAKE}")
    layers = int(info["thinking_layers"] if kind == "think" else info["decoding_layers"])
    if layers == 0:
        return None
    manifest = engine.manifest
    copy = replace(manifest, config=replace(manifest.config, num_layers=layers),
                   graphs=[GraphEntry(**g) for g in info[f"{kind}_graphs"]], extras={})
    graphs = engine.graphs
    return Engine(engine.folder, copy, graphs.threads, graphs.providers, graphs.session_options)


class CopyDrafter(Drafter):
    """What both modes share: the thinking copy and a decoding graph set (`decoding`: decode or draft), their KV
    caches, and the refill that turns tapped states into heads."""

    decoding = "decode"

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.think = copy_engine(engine, "think")
        self.decode = copy_engine(engine, self.decoding)
        self.info = engine.manifest.extras["dmtd"]
        self.decoding_layers = int(self.info["decoding_layers"])

    def start(self, engine: Engine, prompt_ids: Sequence[int]) -> None:
        if self.think is not None:
            self.think.reset()
        self.decode.reset()

    def refill(self, tapped: np.ndarray) -> np.ndarray:
        """Tapped states of the next positions through the thinking copy, then as heads through the decoding
        graphs; both caches commit them. The decoding logits of those rows."""
        rows = tapped if self.think is None else self.run(self.think, tapped).layer_hidden
        return self.run(self.decode, rows).logits

    @staticmethod
    def run(copy: Engine, rows: np.ndarray) -> GraphOutput:
        """Run and commit a chain of input rows after the copy's cache."""
        out = copy.run_block(rows, np.arange(-1, rows.shape[0] - 1))
        copy.commit(out, np.arange(rows.shape[0]))
        return out


@dataclass(frozen=True)
class DmtdSpecOptions:
    # 1: on the fast DMTD bundle (the default's), on 13 tuning questions (none of the 52 report ones)
    # draft_len 1 / 2 / 3 ran at 0.90x / 0.69x / 0.62x plain decoding of that bundle (τ 1.36 / 1.48 / 1.51): a
    # second draft costs a sequential copy call and a width-4 verifying call for +0.1 τ
    # (benchmarks/results/dmtd/session25/tune-fast-13q). On the float32 bundle 1 and 2 ran alike (0.81x / 0.79x,
    # session24/tune-13q). With lookup on, 1 / 2 ran at 1.13x / 1.05x (τ 1.73 / 1.79; session27/tune-dl2)
    draft_len: int = option(1, "tokens the copy drafts per step (0 = plain decoding)")
    # on: the same 13 questions ran at 1.13x plain decoding against 0.90x for the copy alone; 52 report questions
    # 1.04x against 0.92x on a quiet machine, 1.10x against 0.94x under load (benchmarks/results/dmtd/README.md,
    # twenty-seventh session)
    lookup: bool = option(True, "a step whose prompt-lookup chain promises more tokens per second than the copy's "
                                "draft verifies that chain instead, and skips the copy's calls")
    # auto: τ 1.68 against 1.65 without the table on the 52 report questions, both 1.08x plain decoding
    # (benchmarks/results/dmtd/README.md, twenty-eighth session)
    static: str = option("auto", STATIC_HELP)

    def __post_init__(self) -> None:
        if self.draft_len < 0:
            raise ValueError(f"draft_len must be >= 0, got {self.draft_len}")


class DmtdSpecDrafter(CopyDrafter):
    """self-speculative DMTD: a DMTD bundle's trained late-layer copy drafts, the base model verifies"""

    name = "dmtd-spec"
    Options = DmtdSpecOptions
    decoding = "draft"
    sized = True  # the lookup choice reads the engine's cost table

    def __init__(self, engine: Engine, options: DmtdSpecOptions) -> None:
        super().__init__(engine)
        self.draft_len = options.draft_len
        # a step's draft call holds the last verified path (at most draft_len + 1 heads) and the root
        widest = min(engine.graphs.max_decode_width - 1, self.decode.graphs.max_width - 2)
        self.copy_width = self.decode.graphs.max_decode_width  # rows per copy call outside the prefill
        if self.draft_len > widest:
            raise ValueError(f"draft_len must be in [0, {widest}] for this bundle's graph widths, got {self.draft_len}")
        self.shortlist = np.load(bundle_file(engine.folder, self.info["shortlist_file"]))
        self.settings = {"drafter": self.name, "draft_len": self.draft_len, "decoding_layers": self.decoding_layers,
                         "thinking_layers": int(self.info["thinking_layers"]), "shortlist": int(self.shortlist.size),
                         "lookup": options.lookup and self.draft_len > 0, "lossy": False}
        table = static_table(options.static, engine) if self.settings["lookup"] else None
        self.settings["static"] = "none" if table is None else options.static
        self.choice = LookupOrCopy(engine, self.draft_len, table) if self.settings["lookup"] else None
        self._heads = np.zeros((0, engine.config.hidden_size), dtype=np.float32)  # verified, not yet in the copy

    def start(self, engine: Engine, prompt_ids: Sequence[int]) -> None:
        super().start(engine, prompt_ids)
        self._heads = self._heads[:0]
        if self.choice is not None:
            self.choice.reset()

    def observe_prefill(self, out: GraphOutput) -> None:
        if self.draft_len:
            self.refill(out.layer_hidden)

    def propose(self, context_ids: Sequence[int], root: int, lead: int = 0) -> tuple[DraftTree, None]:
        room = self.engine.cache.free - 1  # every draft's position must fit the context
        chain_room = min(room, self.engine.graphs.max_decode_width - 1 - lead)
        if self.choice is not None and chain_room > 0:
            chain = self.choice.lookup_chain(context_ids, root, chain_room)
            if chain is not None:
                return DraftTree(chain, np.arange(-1, len(chain) - 1)), None
        drafts = min(self.draft_len, room)
        if drafts <= 0:
            return DraftTree.single(root), None
        started = time.perf_counter()
        tokens, first_prob = self._draft(root, drafts)
        if self.choice is None:
            chain = np.asarray([root, *tokens])
        else:
            self.choice.copy_ran(time.perf_counter() - started)
            chain = self.choice.copy_chain(context_ids, root, tokens, first_prob, chain_room)
        return DraftTree(chain, np.arange(-1, len(chain) - 1)), None

    def _draft(self, root: int, drafts: int) -> tuple[list[int], float]:
        """The copy's chain after the root (the verified tokens enter as heads, then the root from its embedding),
        and the copy's probability of its first token."""
        embed = self.engine.embed
        heads = self._heads
        while len(heads) + 1 > self.copy_width:  # heads piled up over lookup steps: into the copy in chunks
            self.refill(heads[:self.copy_width])
            heads = heads[self.copy_width:]
        if self.think is not None and len(heads):
            heads = self.run(self.think, heads).layer_hidden
        # one call: the verified tokens as heads (kept) + the root from its embedding alone (dropped below)
        probs = softmax_rows(self.run(self.decode, np.concatenate([heads, embed(np.array([root]))])).logits[-1:])[0]
        first = int(np.argmax(probs))
        tokens = [int(self.shortlist[first])]
        for _ in range(drafts - 1):
            logits = self.run(self.decode, embed(np.array(tokens[-1:]))).logits
            tokens.append(int(self.shortlist[np.argmax(logits[0])]))
        self.decode.cache.truncate(self.engine.cache.n_past)  # keep the heads, up to the root's position
        self._heads = self._heads[:0]
        return tokens, float(probs[first])

    def observe(self, tree: DraftTree, out: GraphOutput, path: list[int]) -> None:
        if self.draft_len:  # the verified tokens become heads in the next copy call
            self._heads = np.concatenate([self._heads, out.layer_hidden[path]])
        if self.choice is not None:
            self.choice.observe(tree, out, path)

    def step_kinds(self) -> dict[str, int] | None:
        return dict(self.choice.steps) if self.choice is not None else None


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
        if self.tau > engine.graphs.max_decode_width:
            raise ValueError(f"τ must be in [1, {engine.graphs.max_decode_width}] for this bundle's decode graph "
                             f"widths, got {self.tau}")
        self.settings = {"drafter": self.name, "tau": self.tau, "decoding_layers": self.decoding_layers,
                         "thinking_layers": int(self.info["thinking_layers"]), "lossy": True}
        self._chain: list[int] = []
        self._chain_logits: list[np.ndarray] = []
        self._prompt_logits: np.ndarray | None = None  # the copy's logits of the last prompt chunk

    def observe_prefill(self, out: GraphOutput) -> None:
        self._prompt_logits = self.refill(out.layer_hidden)  # every prompt position is a head

    def propose(self, context_ids: Sequence[int], root: int, lead: int = 0) -> tuple[DraftTree, None]:
        """The chain from the root up to the next head (or to the end of the context), drafted from embeddings."""
        length = min(self.tau, self.engine.cache.free)
        tokens = self._chain = [root]
        self._chain_logits = []
        for _ in range(length - 1):  # positions between heads: the copy sees the embedding alone
            self._chain_logits.append(self.run(self.decode, self.engine.embed(np.array(tokens[-1:]))).logits[0])
            tokens.append(int(np.argmax(self._chain_logits[-1])))
        return DraftTree(np.asarray(tokens), np.arange(-1, len(tokens) - 1)), None

    def own_logits(self, out: GraphOutput) -> np.ndarray:
        if self._prompt_logits is not None:  # the prompt's last chunk: refilled in observe_prefill
            logits, self._prompt_logits = self._prompt_logits, None
            return logits
        # the chain's drafts leave the decoding cache and come back as heads, the last one the cycle's head
        self.decode.cache.truncate(self.decode.cache.n_past - len(self._chain_logits))
        head = self.refill(out.layer_hidden)[-1]
        return np.stack([*self._chain_logits, head])

"""The engine: a loaded bundle, its KV cache, and one verb that runs any block of slots in one graph call.

    engine = Engine.load("bundles/smollm2")
    logits = engine.prefill(prompt_ids)                        # commits the prompt's KV
    out = engine.run_tree(tree, slot_embeddings)               # one call: tree nodes (+ mask slots)
    engine.commit(out, accepted_slots)                         # the accepted slots' K/V join the cache
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

from .attention_bias import CachedAttentionBias
from .bundle import BundleError, Manifest, read_manifest
from .contract import CACHE_SLOTS, LORA_GATE
from .cost_table import CostTable
from .graphs import GraphOutput, GraphSet
from .kv_cache import ContextOverflowError, KVCache
from .rope import inverse_frequencies, rope_tables
from .tokenizer import TextTokenizer
from .tree import SLOT, DraftTree, tree_layout
from .tree_templates import check_template, templates_from_extras

log = logging.getLogger(__name__)


def leading_chain(parents: np.ndarray) -> int:
    """How many first nodes form a chain from the root (node i the child of node i - 1): the rows whose keys sit
    at the cache columns of their positions, where plain decoding reads them (runtime/contract.py)."""
    breaks = np.flatnonzero(np.asarray(parents[1:]) != np.arange(len(parents) - 1))
    return int(breaks[0]) + 1 if breaks.size else len(parents)


class Engine:
    def __init__(self, folder: Path, manifest: Manifest, threads: int | None = None,
                 providers: list | None = None, session_options: dict[str, str] | None = None,
                 mask_value: float | None = None, eager: bool = True) -> None:
        """mask_value: the attention bias's hidden value (default the manifest's; QDQ calibration passes its own).
        eager: create every graph's session now, so that no generation pays for one (chat, serve, bench); False
        leaves it to `generate`, which creates those its request can reach before its clock starts: a one-shot
        answer of the default bundle then creates 5 of its 15 sessions (results/fast section 39)."""
        self.folder = folder
        self.manifest = manifest
        cfg = manifest.config
        self.config = cfg
        self.context = manifest.context
        self.mask_value = np.float32(manifest.mask_value if mask_value is None else mask_value)
        self.tokenizer = TextTokenizer(folder, manifest.tokenizer)
        self.embeddings = np.load(folder / manifest.embeddings_file, mmap_mode="r")
        if self.embeddings.shape != (cfg.vocab_size, cfg.hidden_size):
            raise BundleError(f"embedding table has shape {self.embeddings.shape}, the manifest says "
                              f"{(cfg.vocab_size, cfg.hidden_size)}: re-run `mtpedge export`")
        self.inv_freq = inverse_frequencies(cfg.rope, cfg.head_dim)
        self.graphs = GraphSet(folder, manifest, threads, providers, session_options)
        if eager:
            self.graphs.load_all()
        self.cache = KVCache(cfg.num_layers, cfg.num_kv_heads, self.context, cfg.head_dim, manifest.context_buckets)
        self.graph_calls = 0
        self.graph_seconds = 0.0
        # what a call of each decode width costs here (runtime/cost_measure.py); drafters that size their trees
        # read it (None: they fill their width)
        self.cost_table: CostTable | None = None
        # Host work per call kept small: RoPE rows for every position computed once; block layouts read from the
        # bundle's tree templates (checked here, once) or computed once per other tree shape; one bias buffer
        # per width, updated in place (see attention_bias).
        max_position = self.context + self.graphs.max_width
        self._rope_cos, self._rope_sin = rope_tables(np.arange(max_position), self.inv_freq)
        self._biases = {(e.width, e.context): CachedAttentionBias(e.width, e.context, self.mask_value)
                        for e in self.graphs.entries}
        self.templates = templates_from_extras(manifest.extras)
        self._template_layouts: dict[bytes, tuple[np.ndarray, np.ndarray]] = {}
        for template in self.templates:
            problem = check_template(template)
            if problem:
                raise BundleError(f"{problem}: the bundle's tree templates are corrupt; re-run `mtpedge export`")
            parents = np.asarray(template.parents, dtype=np.int64)
            self._template_layouts[parents.tobytes()] = (template.visible_matrix(),
                                                         np.asarray(template.depth, np.int64))
        self._layouts: dict[bytes, tuple[np.ndarray, np.ndarray]] = {}  # other shapes, computed once

    @classmethod
    def load(cls, folder: str | Path, threads: int | None = None, providers: list | None = None,
             session_options: dict[str, str] | None = None, mask_value: float | None = None,
             eager: bool = True) -> Engine:
        folder = Path(folder)
        return cls(folder, read_manifest(folder), threads, providers, session_options, mask_value, eager)

    @property
    def stop_token_ids(self) -> set[int]:
        return set(self.manifest.tokenizer.eos_token_ids)

    def embed(self, tokens: np.ndarray) -> np.ndarray:
        return np.asarray(self.embeddings[np.asarray(tokens, dtype=np.int64)], dtype=np.float32)

    def block_layout(self, parents: np.ndarray) -> tuple[np.ndarray, np.ndarray, bytes]:
        """(visible, depth, key) of a block: its template's if the bundle has one, else computed once per shape."""
        parents = np.asarray(parents, dtype=np.int64)
        key = parents.tobytes()
        layout = self._template_layouts.get(key) or self._layouts.get(key)
        if layout is None:
            if len(self._layouts) >= 4096:  # a bound, for drafters whose shapes never repeat
                self._layouts.clear()
            computed = tree_layout(parents)
            layout = self._layouts[key] = (computed.visible, computed.depth)
        return layout[0], layout[1], key

    def run_block(self, embeds: np.ndarray, parents: np.ndarray, gate: np.ndarray | None = None) -> GraphOutput:
        """One graph call over n slots arranged as a tree rooted at position n_past; nothing is committed.

        Padding rows (up to the graph's width) see only the column they share, so their softmax stays finite
        (attention_bias.py); the block must leave them a free position.
        gate (n,): the adapter's LoRA gate per slot (graphs with a `lora_gate` input only; default all 0 = the
        base model).
        """
        n = embeds.shape[0]
        visible, depth, key = self.block_layout(parents)
        width, n_past = self.graphs.entry_for(n).width, self.cache.n_past
        inside = self._rows_with_columns(n, width)
        if inside < 1:
            raise ContextOverflowError(
                f"a block of {n} slots at position {n_past} in a graph of width {width} finds no free cache column "
                f"for its padding (context {self.context}): the last position needs a graph exactly as wide as the "
                "block, or export with a larger --context")
        if inside < n:  # rows past the context's end share the padding rows' column; their outputs mean nothing
            visible, key = visible[:inside, :inside], None
        # the smallest context bucket that holds the block's columns, the padding rows' one included
        self.cache.reserve(inside + (inside < width))
        entry = self.graphs.entry_for(n, context=self.cache.capacity)
        positions = np.full(width, n_past, dtype=np.int64)
        positions[:n] += depth
        bias, slots = self._biases[(width, entry.context)].fill(n_past, visible, key)
        cos, sin = self._rope_cos[:, :, positions], self._rope_sin[:, :, positions]
        padded = np.zeros((1, width, self.config.hidden_size), dtype=np.float32)
        padded[0, :n] = embeds
        feeds = {"inputs_embeds": padded, "attention_bias": bias, "rope_cos": cos, "rope_sin": sin,
                 CACHE_SLOTS: slots}
        if LORA_GATE in entry.inputs:
            feeds[LORA_GATE] = np.zeros((1, width), dtype=np.float32)
            if gate is not None:
                feeds[LORA_GATE][0, :n] = gate
        elif gate is not None and np.any(gate):
            raise BundleError("a drafter asked for the LoRA gate but this bundle's graphs have no adapter: "
                              "export one with `mtpedge export --mtp-adapter ADAPTER.pt`")
        feeds.update(self.cache.graph_inputs())
        out = self.graphs.run(entry, feeds, n)
        out.plain_rows = min(inside, leading_chain(parents))
        out.rows_in_cache = min(out.rows_in_cache, inside)  # rows past the context's end share the pad column
        self.graph_calls += 1
        self.graph_seconds += out.seconds
        return out

    def _rows_with_columns(self, n: int, width: int) -> int:
        """How many of a block's first rows get a cache column of their own: all n when they and (with padding)
        one shared column fit the context; else all but the last free column, which the rest share."""
        room = self.context - self.cache.n_past
        return n if n + (n < width) <= room else min(n, room - 1)

    def fits(self, n: int) -> bool:
        """Whether a block of n slots runs at the current position with every row inside the context."""
        return self._rows_with_columns(n, self.graphs.entry_for(n).width) == n

    def tree_embeddings(self, tree: DraftTree, slot_embeddings: np.ndarray | None = None) -> np.ndarray:
        """Embeddings of a tree's nodes: table rows for tokens, drafter-supplied vectors for SLOT nodes."""
        is_slot = tree.tokens == SLOT
        embeds = np.zeros((len(tree), self.config.hidden_size), dtype=np.float32)
        embeds[~is_slot] = self.embed(tree.tokens[~is_slot])
        if is_slot.any():
            if slot_embeddings is None or slot_embeddings.shape != (int(is_slot.sum()), self.config.hidden_size):
                raise ValueError(f"the tree has {int(is_slot.sum())} slot nodes: pass one embedding row for each")
            embeds[is_slot] = slot_embeddings
        return embeds

    def run_tree(self, tree: DraftTree, slot_embeddings: np.ndarray | None = None,
                 lora_on_slots: bool = False) -> GraphOutput:
        """lora_on_slots: gate 1 at SLOT nodes (the adapter's learned masks), 0 at token nodes."""
        gate = (tree.tokens == SLOT).astype(np.float32) if lora_on_slots else None
        return self.run_block(self.tree_embeddings(tree, slot_embeddings), tree.parents, gate)

    def commit(self, out: GraphOutput, slots: Sequence[int] | np.ndarray) -> None:
        """Append the K/V rows of a call's block slots `slots` (in order) to the cache; rows the graph already
        wrote at their own cache column are not copied again (GraphOutput.rows_in_cache)."""
        self.cache.commit_accepted_kv(out.new_keys, out.new_values, slots, out.rows_in_cache)

    def prefill(self, token_ids: list[int] | np.ndarray) -> np.ndarray:
        """Run and commit `token_ids` after the cache's contents; returns the last token's logits (vocab,)."""
        last = deque(self.prefill_chunks(token_ids), maxlen=1)[0]  # only the last chunk's output is kept
        return last.logits[-1]

    def prefill_chunks(self, token_ids: list[int] | np.ndarray) -> Iterator[GraphOutput]:
        """Run and commit `token_ids` in chunks of the prefill graph's width, yielding each chunk's output."""
        tokens = np.asarray(token_ids, dtype=np.int64)
        if tokens.size == 0:
            raise ValueError("prefill needs at least one token")
        if tokens.size > self.cache.free:
            raise ContextOverflowError(
                f"the prompt has {tokens.size} tokens but only {self.cache.free} of the bundle's "
                f"{self.context} context positions are free: shorten the prompt or export with a larger --context"
            )
        start = 0
        while start < tokens.size:
            size = min(self.graphs.prefill_width, tokens.size - start)
            while size > 1 and not self.fits(size):  # at the context's end: leave the padding rows a column
                size -= 1
            part = tokens[start: start + size]
            chain = np.arange(-1, part.size - 1)  # a chain is plain causal attention
            out = self.run_block(self.embed(part), chain)
            self.commit(out, np.arange(part.size))
            start += size
            yield out

    def reset(self) -> None:
        self.cache.reset()

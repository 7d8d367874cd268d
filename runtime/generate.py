"""The decode loop: prefill, then { draft tree -> one graph call -> verify -> commit } until done.

Plain autoregressive decoding is the same loop with a tree of one node (no drafter).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
from threadpoolctl import threadpool_limits

from .drafters.base import Drafter
from .engine import Engine
from .graphs import GraphOutput
from .kv_cache import ContextOverflowError
from .sampling import Sampler, SamplingConfig
from .tree import DraftTree
from .verify import accepted_tokens, untrusted_extension, verify_tree

OVERFLOW_POLICIES = ("error", "stop")
LOSSY_WARNING = ("{name} is LOSSY: its drafted tokens are emitted without verification, so the output differs from "
                 "the model's own; use a lossless drafter (e.g. dmtd-spec) for identical output")


def accepted_drafts(histogram: Mapping[int, int]) -> int:
    """Drafts accepted in all, from a histogram {k: decode calls that accepted k drafts}."""
    return sum(k * calls for k, calls in histogram.items())


def calls_reaching_depth(histogram: Mapping[int, int]) -> dict[int, int]:
    """{d: decode calls that accepted at least d drafts} for d = 1 .. the deepest acceptance in the histogram."""
    deepest = max(histogram, default=0)
    return {d: sum(calls for k, calls in histogram.items() if k >= d) for d in range(1, deepest + 1)}


@dataclass
class GenerationStats:
    prompt_tokens: int = 0
    new_tokens: int = 0
    prefill_calls: int = 0
    decode_calls: int = 0
    prefill_seconds: float = 0.0
    prefill_graph_seconds: float = 0.0  # the graph calls' part of prefill_seconds
    graph_seconds: float = 0.0
    elapsed_seconds: float = 0.0
    accepted_histogram: Counter = field(default_factory=Counter)  # drafts accepted per decode call
    finish_reason: str = ""
    drafter: str = "none"
    drafter_settings: dict = field(default_factory=dict)
    lossless: bool = True  # False: a lossy drafter's tokens were emitted unverified
    sizing: dict | None = None  # a cost-aware drafter's cost model and predicted vs achieved tokens/s
    carried_blocks: int = 0  # decode calls led by drafts the call before accepted on untrusted rows
    drafter_steps: dict | None = None  # steps of each kind, for a drafter that drafts in more than one way

    @property
    def forward_calls(self) -> int:
        return self.prefill_calls + self.decode_calls

    @property
    def tokens_per_call(self) -> float:
        """τ: tokens committed per decode call (accepted drafts + the call's own token); plain decoding = 1."""
        return 1.0 + accepted_drafts(self.accepted_histogram) / self.decode_calls if self.decode_calls else 1.0

    @property
    def accepted_per_depth(self) -> dict[int, int]:
        """Calls whose accepted path reached draft depth d (d = 1, 2, ...): a depth-wise acceptance count."""
        return calls_reaching_depth(self.accepted_histogram)

    @property
    def decode_seconds(self) -> float:
        return self.elapsed_seconds - self.prefill_seconds

    @property
    def tokens_per_second(self) -> float:
        """Decode speed: tokens after the first over the time after prefill (as llama.cpp's eval rate)."""
        return (self.new_tokens - 1) / self.decode_seconds if self.new_tokens > 1 and self.decode_seconds > 0 else 0.0

    @property
    def decode_graph_seconds(self) -> float:
        """The graph calls' part of decode_seconds."""
        return self.graph_seconds - self.prefill_graph_seconds

    @property
    def host_seconds(self) -> float:
        return self.elapsed_seconds - self.graph_seconds

    def to_dict(self) -> dict:
        return {
            "prompt_tokens": self.prompt_tokens,
            "new_tokens": self.new_tokens,
            "forward_calls": self.forward_calls,
            "prefill_calls": self.prefill_calls,
            "decode_calls": self.decode_calls,
            "tokens_per_call": round(self.tokens_per_call, 4),
            "tokens_per_s": round(self.tokens_per_second, 3),
            "elapsed_s": round(self.elapsed_seconds, 4),
            "prefill_s": round(self.prefill_seconds, 4),
            "graph_s": round(self.graph_seconds, 4),
            "host_s": round(self.host_seconds, 4),
            "accepted_per_call": {str(k): v for k, v in sorted(self.accepted_histogram.items())},
            "accepted_per_depth": {str(k): v for k, v in self.accepted_per_depth.items()},
            "finish_reason": self.finish_reason,
            "drafter": self.drafter,
            "drafter_settings": self.drafter_settings,
            "lossless": self.lossless,
            "sizing": self.sizing,
            "carried_blocks": self.carried_blocks,
            "drafter_steps": self.drafter_steps,
        }


@dataclass
class GenerationResult:
    token_ids: list[int]  # new tokens only (a stop token that ended the run is not included)
    stats: GenerationStats


@dataclass
class _Output:
    """What a run has emitted: the new tokens, cut at a stop token or the limit (the reason goes into the stats),
    appended to the context the drafter reads and streamed to on_tokens."""

    context: list[int]  # the prompt, then every emitted token
    stops: set[int]
    limit: int
    stats: GenerationStats
    on_tokens: Callable[[list[int]], None] | None
    new: list[int] = field(default_factory=list)

    def emit(self, tokens: list[int]) -> bool:
        """Append tokens up to a stop token or the limit; True when generation is finished."""
        kept = []
        for token in tokens:
            if token in self.stops:
                self.stats.finish_reason = "stop"
                break
            kept.append(token)
            if len(self.new) + len(kept) >= self.limit:
                self.stats.finish_reason = "length"
                break
        self.new.extend(kept)
        self.context.extend(kept)
        if kept and self.on_tokens:
            self.on_tokens(kept)
        return bool(self.stats.finish_reason)


# numpy's multi-threaded BLAS spins idle threads after the host's small products (the mtp sampler head: a few
# (m, 1152) x (1152, 576)) that take the cores from onnxruntime: on 2 cores, mtp tree host time 32 -> 6 ms per step
# and graph calls 7-13% faster with one BLAS thread (benchmarks/results/mtp/speed-13q-blas1.log). Limited for the
# length of each call only (threadpoolctl restores the caller's setting after it); blas_threads.py re-measures it.
@threadpool_limits.wrap(limits=1, user_api="blas")
def generate(
    engine: Engine,
    prompt_ids: Sequence[int],
    max_new_tokens: int = 128,
    sampling: SamplingConfig | None = None,
    stop_token_ids: set[int] | None = None,
    on_tokens: Callable[[list[int]], None] | None = None,
    drafter: Drafter | None = None,
    on_overflow: str = "error",
    should_stop: Callable[[], bool] | None = None,
) -> GenerationResult:
    """Generate up to `max_new_tokens` after `prompt_ids`, starting from an empty cache.

    on_tokens receives each step's new tokens as they are accepted (streaming). on_overflow: "error"
    raises ContextOverflowError when the context fills up; "stop" ends the run with finish_reason "length".
    should_stop is polled between steps (cancellation). A lossy drafter (`drafter.lossy`) has its tree verified
    against its own logits instead of the model's: its tokens are emitted as drafted (see LOSSY_WARNING).
    """
    sampler = Sampler(sampling or SamplingConfig())
    _check_request(engine, prompt_ids, max_new_tokens, sampler, drafter, on_overflow)
    # sessions of a lazily loaded engine: created before the clock starts, so that the stats time decoding only
    engine.graphs.load_within(len(prompt_ids) + max_new_tokens + engine.graphs.max_width)
    lossy = bool(drafter and drafter.lossy)
    stops = engine.stop_token_ids if stop_token_ids is None else set(stop_token_ids)
    stats = GenerationStats(prompt_tokens=len(prompt_ids), drafter=drafter.name if drafter else "none",
                            drafter_settings=dict(drafter.settings) if drafter else {}, lossless=not lossy)
    started = time.perf_counter()
    graph0, calls0 = engine.graph_seconds, engine.graph_calls
    out = _prefill(engine, prompt_ids, drafter)
    # the logits a tree is verified against: the model's, or a lossy drafter's own
    judge: Callable[[GraphOutput], np.ndarray] = drafter.own_logits if lossy else lambda graph_out: graph_out.logits
    stats.prefill_calls = engine.graph_calls - calls0
    stats.prefill_seconds = time.perf_counter() - started
    stats.prefill_graph_seconds = engine.graph_seconds - graph0
    output = _Output(list(prompt_ids), stops, max_new_tokens, stats, on_tokens)
    emit, context = output.emit, output.context
    root = sampler.choose(judge(out)[-1])
    done = emit([root])
    carry: list[int] = []  # drafts the last call's untrusted rows accepted after the root: this block's lead
    while not done:
        if should_stop and should_stop():
            stats.finish_reason = "cancelled"
            break
        if engine.cache.free < 1 or not engine.fits(1):
            if on_overflow == "stop":
                stats.finish_reason = "length"
                break
            engine.cache.ensure_room(engine.cache.free + 1)
        # the last free position: one plain step (a tree's padding rows would find no free cache column)
        drafting = drafter is not None and engine.cache.free > 1
        block = _propose(drafter, engine, context, root, carry) if drafting else _Block(DraftTree.single(root))
        drafts, root, carry = _decode_step(engine, drafter, block, judge, sampler.choose, lossy)
        stats.decode_calls += 1
        stats.carried_blocks += block.lead > 0
        stats.accepted_histogram[len(drafts)] += 1
        done = emit(drafts + [root])
    stats.new_tokens = len(output.new)
    stats.elapsed_seconds = time.perf_counter() - started
    if drafter is not None and drafter.sizer is not None:
        stats.sizing = drafter.sizer.stats()
    if drafter is not None:
        stats.drafter_steps = drafter.step_kinds()
    stats.graph_seconds = engine.graph_seconds - graph0
    return GenerationResult(output.new, stats)


@dataclass
class _Block:
    """One decode call's tree: the drafter's own (`own`; None on a plain step), led by `lead` nodes, the root and
    the drafts carried from the call before but the last, which roots `own` (lead 0: the drafter's tree as it is)."""

    tree: DraftTree
    slot_embeddings: np.ndarray | None = None
    own: DraftTree | None = None
    lead: int = 0

    def observe(self, drafter: Drafter, out: GraphOutput, path: list[int]) -> None:
        """Show the drafter its own tree's rows and path; nothing when the block failed before reaching it."""
        if self.lead == 0:
            drafter.observe(self.tree, out, path)
        elif len(path) > self.lead:
            drafter.observe(self.own, out.rows_from(self.lead), [node - self.lead for node in path[self.lead:]])


def _decode_step(engine: Engine, drafter: Drafter | None, block: _Block, judge: Callable[[GraphOutput], np.ndarray],
                 choose: Callable[[np.ndarray], int], lossy: bool) -> tuple[list[int], int, list[int]]:
    """One graph call: run the block, verify it, commit the accepted path. Returns the drafts accepted, the next
    root and the drafts carried into the next block."""
    drafting = block.own is not None
    tree = block.tree
    out = engine.run_tree(tree, block.slot_embeddings, lora_on_slots=drafter.lora_on_slots if drafting else False)
    # only rows plain decoding would compute bit for bit are read: the block's leading chain inside the context
    logits = judge(out) if drafting else out.logits
    full_path, root = verify_tree(tree, logits, choose, out.plain_rows)
    path = full_path[: engine.cache.free]
    carry, seen = [], path
    if len(path) < len(full_path):  # no room for the whole path: the first node left out becomes the root
        root = int(tree.tokens[full_path[len(path)]])
    elif drafting and not lossy:
        nodes, carry = untrusted_extension(tree, logits, path, root, out.plain_rows)
        seen = path + nodes
    engine.commit(out, path)
    if drafting:
        block.observe(drafter, out, seen)
    return [int(t) for t in accepted_tokens(tree, path)], root, carry


def _propose(drafter: Drafter, engine: Engine, context: list[int], root: int, carry: list[int]) -> _Block:
    """The drafter's tree for this step, led by the carried drafts when it fits beside them.

    A sibling of the leading chain that matched is not accepted (its rows are not plain decoding's), but it is
    the next root and its rows' greedy path is almost surely right: those tokens lead this block as a chain
    that trusted rows now verify, and the drafter drafts on from their end, as if the last call had accepted
    them. Without the carry that path would be lost and drafted again, or not, from the root alone
    (benchmarks/results/fast/README.md, section 19)."""
    room = engine.graphs.max_decode_width - len(carry)
    if carry and room > 0 and len(carry) + 1 < engine.cache.free:
        own, slot_embeddings = drafter.propose(context + carry, carry[-1], lead=len(carry))
        if len(own) <= room:
            lead = len(carry)
            tokens = np.concatenate([[root, *carry[:-1]], own.tokens])
            parents = np.concatenate([np.arange(-1, lead - 1), np.where(own.parents < 0, lead - 1, own.parents + lead)])
            return _Block(DraftTree(tokens, parents), slot_embeddings, own, lead)
    own, slot_embeddings = drafter.propose(context, root)
    return _Block(own, slot_embeddings, own)


def _check_request(engine: Engine, prompt_ids: Sequence[int], max_new_tokens: int, sampler: Sampler,
                   drafter: Drafter | None, on_overflow: str) -> None:
    """Refuse what the loop cannot run, before any work: a clear message each."""
    if on_overflow not in OVERFLOW_POLICIES:
        raise ValueError(f"on_overflow must be one of {OVERFLOW_POLICIES}, got {on_overflow!r}")
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    if drafter is not None and drafter.lossy and not sampler.config.greedy:
        raise ValueError(f"{drafter.name} is lossy and decodes greedily only: drop the temperature, or use a "
                         "lossless drafter")
    if len(prompt_ids) >= engine.context:
        raise ContextOverflowError(
            f"the prompt has {len(prompt_ids)} tokens but the bundle's context is {engine.context} "
            "(room is needed for at least one new token): shorten the prompt or export with a larger --context"
        )


def _prefill(engine: Engine, prompt_ids: Sequence[int], drafter: Drafter | None) -> GraphOutput:
    """Run the prompt from an empty cache (the drafter sees every chunk); the last chunk's outputs."""
    engine.reset()
    if drafter:
        drafter.start(engine, prompt_ids)
    for out in engine.prefill_chunks(prompt_ids):
        if drafter:
            drafter.observe_prefill(out)
    return out

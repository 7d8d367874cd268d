"""DMTD decoding on a DMTD bundle's part graphs: the paper's lossy direct mode and a lossless self-speculative one.

`dmtd` (LOSSY, the paper's inference): the prompt runs through the thinking layers and the trained decoding
copy (every prompt position is a head). From the prompt's last position on, every τ-th position is a cycle head:
there the thinking layers run over the τ tokens that skipped them (refilling their KV) and the decoding copy sees
emb + h_think; the τ - 1 tokens after a head run only the decoding copy on their embedding. The output is the
DMTD model's, not the base model's: it is not verified.

`dmtd-spec` (LOSSLESS): the trained decoding copy drafts a chain of k tokens from embeddings alone; the base
model (thinking part + base decoding part = the unchanged model of the same bundle) scores the chain in one pass
per part and `verify_tree` keeps exactly what the base model itself would choose. The verified tokens' thinking
states then refill the decoding copy's KV (as heads), in the same call that drafts the next chain.
With k = 0 it is plain decoding through the parts.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import numpy as np

from .dmtd_parts import DmtdParts
from .generate import GenerationResult, GenerationStats
from .sampling import Sampler, SamplingConfig
from .tree import DraftTree
from .verify import verify_tree

LOSSY_WARNING = ("dmtd is LOSSY: tokens between cycle heads come from the last layers alone and are not verified, "
                 "so the output differs from the base model's; use dmtd-spec for identical output")


class _Emitter:
    """Appends tokens up to a stop token or the limit (the same rules as runtime.generate)."""

    def __init__(self, stats: GenerationStats, stops: set[int], limit: int,
                 on_tokens: Callable[[list[int]], None] | None) -> None:
        self.stats, self.stops, self.limit, self.on_tokens = stats, stops, limit, on_tokens
        self.new: list[int] = []

    def emit(self, tokens: list[int]) -> bool:
        out = []
        for token in tokens:
            if token in self.stops:
                self.stats.finish_reason = "stop"
                break
            out.append(int(token))
            if len(self.new) + len(out) >= self.limit:
                self.stats.finish_reason = "length"
                break
        self.new.extend(out)
        if out and self.on_tokens:
            self.on_tokens(out)
        return bool(self.stats.finish_reason)


def _start(parts: DmtdParts, prompt_ids: Sequence[int], max_new_tokens: int, name: str, settings: dict,
           stop_token_ids: set[int] | None, on_tokens) -> tuple[GenerationStats, _Emitter, float, int]:
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    if not len(prompt_ids):
        raise ValueError("the prompt is empty")
    stats = GenerationStats(prompt_tokens=len(prompt_ids), drafter=name, drafter_settings=settings)
    stops = parts.engine.stop_token_ids if stop_token_ids is None else set(stop_token_ids)
    parts.reset()
    return stats, _Emitter(stats, stops, max_new_tokens, on_tokens), time.perf_counter(), parts.graph_calls


def _finish(parts: DmtdParts, stats: GenerationStats, emitter: _Emitter, started: float,
            graph0: float) -> GenerationResult:
    stats.new_tokens = len(emitter.new)
    stats.elapsed_seconds = time.perf_counter() - started
    stats.graph_seconds = parts.graph_seconds - graph0
    return GenerationResult(emitter.new, stats)


def _room(parts: DmtdParts, needed: int) -> bool:
    return all(p.cache.n_past + needed <= p.context for p in parts.parts.values())


def generate_dmtd(parts: DmtdParts, prompt_ids: Sequence[int], max_new_tokens: int = 128, tau: int = 4,
                  stop_token_ids: set[int] | None = None,
                  on_tokens: Callable[[list[int]], None] | None = None) -> GenerationResult:
    """The paper's direct decoding with cyclic refilling, greedy. LOSSY (see LOSSY_WARNING)."""
    if tau < 1 or tau > parts.thinking.max_width:
        raise ValueError(f"τ must be in [1, {parts.thinking.max_width}] for this bundle's thinking graphs, got {tau}")
    settings = {"tau": tau, "decoding_layers": parts.decoding_layers, "lossy": True}
    graph0 = parts.graph_seconds
    stats, emitter, started, calls0 = _start(parts, prompt_ids, max_new_tokens, "dmtd", settings, stop_token_ids,
                                             on_tokens)
    engine = parts.engine
    prompt = np.asarray(prompt_ids, dtype=np.int64)
    emb = engine.embed(prompt)
    h = parts.thinking.run_chunked(emb, parts.chunk)
    logits = parts.dmtd.run_chunked(emb + h, parts.chunk)[-1]  # every prompt position is a head
    stats.prefill_calls = parts.graph_calls - calls0
    stats.prefill_seconds = time.perf_counter() - started
    anchor = len(prompt) - 1
    context = list(prompt)
    token = int(np.argmax(logits))
    while not emitter.emit([token]):
        if not _room(parts, tau):
            stats.finish_reason = "length"
            break
        context.append(token)
        position = len(context) - 1
        x = engine.embed(np.array([token]))
        if (position - anchor) % tau == 0:  # cycle head: refill the thinking layers' missing KV, then decode
            pending = np.asarray(context[parts.thinking.cache.n_past:], dtype=np.int64)
            out = parts.thinking.run(engine.embed(pending))
            parts.thinking.commit(out, len(pending))
            x = x + out.values[-1:]
        out = parts.dmtd.run(x)
        parts.dmtd.commit(out, 1)
        stats.decode_calls += 1
        token = int(np.argmax(out.values[0]))
    return _finish(parts, stats, emitter, started, graph0)


def generate_dmtd_spec(parts: DmtdParts, prompt_ids: Sequence[int], max_new_tokens: int = 128, draft_len: int = 3,
                       sampling: SamplingConfig | None = None, stop_token_ids: set[int] | None = None,
                       on_tokens: Callable[[list[int]], None] | None = None) -> GenerationResult:
    """Self-speculative DMTD: drafts from the decoding copy, verified by the base model. LOSSLESS."""
    if draft_len < 0 or draft_len + 1 > min(parts.thinking.max_width, parts.base.max_width):
        raise ValueError(f"draft_len must be in [0, {min(parts.thinking.max_width, parts.base.max_width) - 1}] "
                         f"for this bundle's part widths, got {draft_len}")
    sampler = Sampler(sampling or SamplingConfig())
    settings = {"draft_len": draft_len, "decoding_layers": parts.decoding_layers, "lossy": False}
    graph0 = parts.graph_seconds
    stats, emitter, started, calls0 = _start(parts, prompt_ids, max_new_tokens, "dmtd-spec", settings,
                                             stop_token_ids, on_tokens)
    engine = parts.engine
    emb = engine.embed(np.asarray(prompt_ids, dtype=np.int64))
    h = parts.thinking.run_chunked(emb, parts.chunk)
    logits = parts.base.run_chunked(h, parts.chunk)[-1]
    refill = np.zeros((0, emb.shape[1]), dtype=np.float32)
    if draft_len:
        parts.dmtd.run_chunked(emb + h, parts.chunk)  # the prompt is all heads for the drafter
    stats.prefill_calls = parts.graph_calls - calls0
    stats.prefill_seconds = time.perf_counter() - started
    root = sampler.choose(logits)
    done = emitter.emit([root])
    while not done:
        if not _room(parts, draft_len + 2):
            stats.finish_reason = "length"
            break
        tokens = [root]
        if draft_len:
            n = parts.thinking.cache.n_past  # the root's position
            # one call: the last verified tokens as heads (kept) + the root from its embedding alone (dropped later)
            out = parts.dmtd.run(np.concatenate([refill, engine.embed(np.array([root]))]))
            parts.dmtd.commit(out, out.values.shape[0])
            tokens.append(int(np.argmax(out.values[-1])))
            for _ in range(draft_len - 1):
                out = parts.dmtd.run(engine.embed(np.array(tokens[-1:])))
                parts.dmtd.commit(out, 1)
                tokens.append(int(np.argmax(out.values[0])))
            parts.dmtd.cache.truncate(n)
        tree = DraftTree(np.asarray(tokens), np.arange(-1, len(tokens) - 1))
        x = engine.embed(tree.tokens)
        think = parts.thinking.run(x)
        verify = parts.base.run(think.values)
        stats.decode_calls += 1
        path, root = verify_tree(tree, verify.values, sampler.choose)
        parts.thinking.commit(think, len(path))  # a chain's accepted path is its prefix
        parts.base.commit(verify, len(path))
        refill = x[: len(path)] + think.values[: len(path)]
        drafts = [int(t) for t in tree.tokens[1: len(path)]]
        stats.accepted_histogram[len(drafts)] += 1
        done = emitter.emit(drafts + [root])
    return _finish(parts, stats, emitter, started, graph0)


# Methods usable where drafters are named (generate, bench); they run on the part graphs, not as Drafters of the
# full-graph loop, because the drafter needs the thinking layers' hidden states, which only the parts return.
DMTD_METHODS = ("dmtd", "dmtd-spec")


def run_dmtd_method(name: str, parts: DmtdParts, prompt_ids: Sequence[int], max_new_tokens: int,
                    sampling: SamplingConfig | None = None, on_tokens: Callable[[list[int]], None] | None = None,
                    tau: int | None = None, draft_len: int | None = None) -> GenerationResult:
    """`dmtd` (lossy, greedy only; tau default 4) or `dmtd-spec` (lossless; draft_len default 3)."""
    if name == "dmtd":
        if sampling is not None and sampling.temperature > 0:
            raise ValueError("dmtd decodes greedily only: drop --temperature, or use dmtd-spec")
        return generate_dmtd(parts, prompt_ids, max_new_tokens, tau=tau or 4, on_tokens=on_tokens)
    if name == "dmtd-spec":
        return generate_dmtd_spec(parts, prompt_ids, max_new_tokens, draft_len=3 if draft_len is None else draft_len,
                                  sampling=sampling, on_tokens=on_tokens)
    raise ValueError(f"unknown DMTD method {name!r}: choose one of {', '.join(DMTD_METHODS)}")

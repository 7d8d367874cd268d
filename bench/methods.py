"""A bench *method*: anything that turns prompt ids into greedy new ids and says how long it took.

mtpedge's own methods are the drafter registry's names over one Engine ("none" = plain decoding); the
peers (llama.cpp, transformers, optimum-onnx) implement the same protocol in `mtpedge.bench.peers`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol


@dataclass
class MethodRun:
    """One generation. Times exclude nothing but model loading; tokens/s is the decode rate
    (tokens after the first over the time after the first token), as llama.cpp's eval rate."""

    token_ids: list[int]
    first_token_s: float  # prompt processing + the first token
    elapsed_s: float
    decode_calls: int | None = None  # graph calls after prefill; None where a peer cannot say
    accepted_histogram: Counter | None = None  # drafts accepted per decode call
    graph_s: float | None = None  # graph-call seconds after prefill (the decode calls')
    extra: dict = field(default_factory=dict)

    @property
    def new_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def tokens_per_s(self) -> float:
        decode = self.elapsed_s - self.first_token_s
        return (self.new_tokens - 1) / decode if self.new_tokens > 1 and decode > 0 else 0.0


class Method(Protocol):
    name: str
    kind: str  # "mtpedge" | "peer"

    def generate(self, prompt_ids: Sequence[int], max_new_tokens: int) -> MethodRun: ...

    def close(self) -> None: ...


class DrafterMethod:
    """An mtpedge drafter (or plain decoding) over a shared Engine, greedy; `spec` names it with its options
    ("hybrid:width=32"), as everywhere in mtpedge, and is its name in the report unless `name` gives another
    (e.g. the same spec on two bundles)."""

    kind = "mtpedge"

    def __init__(self, engine, spec: str, name: str | None = None) -> None:
        from mtpedge.runtime.drafters import make_drafter, parse_drafter

        parsed = parse_drafter(spec)
        self.engine = engine
        self.name = name or spec
        self._make = lambda: make_drafter(parsed, engine)
        self._make()  # fail now, not at the first question, if the drafter cannot run on this bundle

    def generate(self, prompt_ids: Sequence[int], max_new_tokens: int) -> MethodRun:
        from mtpedge.runtime.generate import generate

        # a fresh drafter per generation: no state can leak from one question (or method order) to the next
        result = generate(self.engine, prompt_ids, max_new_tokens, drafter=self._make(), on_overflow="stop")
        s = result.stats
        # generate() counts the first token inside prefill time; everything after is decode
        return MethodRun(result.token_ids, s.prefill_seconds, s.elapsed_seconds, s.decode_calls,
                         Counter(s.accepted_histogram), s.decode_graph_seconds,
                         {"finish_reason": s.finish_reason, "prefill_calls": s.prefill_calls, "lossless": s.lossless,
                          "sizing": s.sizing})

    def close(self) -> None:
        pass

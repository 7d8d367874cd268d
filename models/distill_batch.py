"""Batched answer generation in PyTorch with a KV cache: the self-distillation workhorse.

Many answers are decoded together: every step runs all active rows through the decoder at once (one (B, 1)
call instead of B calls), which is what makes a million response tokens affordable on two CPU cores.

Cache layout: row b keeps its own tokens at cache slots 0 .. len_b - 1, so a token's slot is its RoPE
position and rows of different lengths need no padding bookkeeping: a query at position p attends to the
slots <= p of its own row (slots past a row's length hold stale values and are masked). Rows are scheduled
by `GenerationConfig.refill`:
    refill  a finished row takes the next waiting prompt at once (its prompt is prefilled into the freed
            row while the others keep decoding), so the batch stays full until the prompts run out;
    shrink  a batch of prompts is prefilled together and decoded until its last row finishes, finished rows
            dropping out; only then is the next batch admitted.
Both compact the cache when the active rows fall to 3/4 of its rows (a copy, so not at every finish).

Each answer carries the teacher's top-k next-token distribution (softmax at temperature 1) at every
response position, for distillation. Sampled answers draw one uniform number per token from their own
seeded generator, so an answer does not depend on which rows it shared a batch with.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from mtpedge.runtime.rope import inverse_frequencies

from .decoder import Decoder, DecoderLayer, apply_rope

MASK_VALUE = -1e9


@dataclass(frozen=True)
class GenerationConfig:
    max_new_tokens: int = 256
    batch: int = 48  # rows decoded together
    top_k: int = 32  # teacher distribution entries kept per response token
    refill: bool = True  # refill a finished row at once (see the module docstring)

    def __post_init__(self) -> None:
        if self.max_new_tokens < 1 or self.batch < 1 or self.top_k < 1:
            raise ValueError(f"max_new_tokens, batch and top_k must be >= 1, got {self}")


@dataclass(frozen=True)
class Request:
    prompt_ids: Sequence[int]
    temperature: float = 0.0  # 0: greedy
    seed: int = 0  # sampled answers only


@dataclass
class Answer:
    response_ids: np.ndarray  # (R,) int64, stop token excluded
    topk_ids: np.ndarray  # (R, k) int32: the teacher's most likely next tokens at each response position
    topk_probs: np.ndarray  # (R, k) float16: their probabilities (temperature 1)
    stopped: bool  # ended on a stop token (False: cut at max_new_tokens)


@dataclass
class _Row:
    index: int  # which request
    request: Request
    rng: np.random.Generator | None
    tokens: list[int] = field(default_factory=list)
    top_ids: list[torch.Tensor] = field(default_factory=list)
    top_probs: list[torch.Tensor] = field(default_factory=list)


class BatchKVCache:
    """Per-layer K/V of shape (rows, Hkv, capacity, D); row b holds its tokens at slots 0 .. lengths[b] - 1."""

    def __init__(self, decoder: Decoder, rows: int, capacity: int, device: torch.device) -> None:
        cfg = decoder.cfg
        shape = (rows, cfg.num_kv_heads, capacity, cfg.head_dim)
        self.keys = [torch.zeros(shape, device=device) for _ in range(cfg.num_layers)]
        self.values = [torch.zeros(shape, device=device) for _ in range(cfg.num_layers)]
        self.lengths = torch.zeros(rows, dtype=torch.long, device=device)

    @property
    def rows(self) -> int:
        return self.lengths.shape[0]

    def keep(self, rows: torch.Tensor) -> None:
        """Drop every row not in `rows` (the kept rows are renumbered 0 .. len(rows) - 1, in that order)."""
        self.keys = [k[rows] for k in self.keys]  # advanced indexing copies: the old buffers are freed
        self.values = [v[rows] for v in self.values]
        self.lengths = self.lengths[rows]


class BatchedGenerator:
    """Greedy or sampled answers of `decoder` to many prompts at once; see the module docstring."""

    def __init__(self, decoder: Decoder, stop_token_ids: Sequence[int], config: GenerationConfig,
                 device: torch.device | str = "cpu") -> None:
        self.decoder = decoder.eval()
        self.cfg = decoder.cfg
        self.config = config
        self.device = torch.device(device)
        self.stop = set(int(t) for t in stop_token_ids)
        self.inv_freq = torch.from_numpy(inverse_frequencies(self.cfg.rope, self.cfg.head_dim))  # float64

    # -- one decoder call over some rows of the cache ------------------------------------------------
    def _rope(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """cos/sin (B, 1, N, D/2) for per-row positions (B, N), in float64 then float32 like `rope_tables`."""
        angles = positions.cpu().double()[..., None] * self.inv_freq
        cos, sin = torch.cos(angles).float()[:, None], torch.sin(angles).float()[:, None]
        return cos.to(self.device), sin.to(self.device)

    def _layer(self, layer: DecoderLayer, h, cos, sin, bias, cache: BatchKVCache, index: int, rows, positions,
               span: int) -> torch.Tensor:
        attn, cfg = layer.self_attn, self.cfg
        b, n, _ = h.shape
        x = layer.input_layernorm(h)
        q = attn.q_proj(x).view(b, n, cfg.num_heads, cfg.head_dim)
        k = attn.k_proj(x).view(b, n, cfg.num_kv_heads, cfg.head_dim)
        v = attn.v_proj(x).view(b, n, cfg.num_kv_heads, cfg.head_dim)
        if cfg.qk_norm:
            q, k = attn.q_norm(q), attn.k_norm(k)
        q = apply_rope(q.transpose(1, 2), cos, sin)  # (B, H, N, D)
        k = apply_rope(k.transpose(1, 2), cos, sin)  # (B, Hkv, N, D)
        keys, values = cache.keys[index], cache.values[index]
        keys[rows[:, None], :, positions] = k.transpose(1, 2)  # slot = position (B, N, Hkv, D)
        values[rows[:, None], :, positions] = v
        if rows.numel() == cache.rows:  # every row: a view of the cache, no copy
            keys, values = keys[:, :, :span], values[:, :, :span]
        else:
            keys, values = keys[rows, :, :span], values[rows, :, :span]
        group = cfg.num_heads // cfg.num_kv_heads
        q = q.reshape(b, cfg.num_kv_heads, group * n, cfg.head_dim) * cfg.head_dim**-0.5
        scores = (q @ keys.transpose(-1, -2)).view(b, cfg.num_kv_heads, group, n, span) + bias
        probs = torch.softmax(scores, dim=-1).view(b, cfg.num_kv_heads, group * n, span)
        out = (probs @ values).view(b, cfg.num_heads, n, cfg.head_dim).transpose(1, 2).reshape(b, n, -1)
        h = h + attn.o_proj(out)
        return h + layer.mlp(layer.post_attention_layernorm(h))

    @torch.no_grad()
    def _forward(self, cache: BatchKVCache, rows: torch.Tensor, token_ids: torch.Tensor,
                 positions: torch.Tensor, last: torch.Tensor) -> torch.Tensor:
        """Run tokens (B, N) at positions (B, N) of cache rows `rows`; logits (B, V) at column last[b]."""
        span = int(positions.max()) + 1
        visible = torch.arange(span, device=self.device)[None, None, :] <= positions[:, :, None]  # (B, N, S)
        bias = torch.where(visible, 0.0, MASK_VALUE)[:, None, None]  # (B, 1, 1, N, S)
        cos, sin = self._rope(positions)
        h = self.decoder.model.embed_tokens(token_ids)
        for i, layer in enumerate(self.decoder.model.layers):
            h = self._layer(layer, h, cos, sin, bias, cache, i, rows, positions, span)
        h = h[torch.arange(h.shape[0], device=self.device), last]
        return self.decoder.lm_head(self.decoder.model.norm(h)).float()

    # -- choosing tokens --------------------------------------------------------------------------------
    def _choose(self, logits: torch.Tensor, rows: list[_Row]) -> list[int]:
        top_probs, top_ids = torch.topk(torch.softmax(logits, dim=-1), self.config.top_k, dim=-1)
        top_probs, top_ids = top_probs.cpu(), top_ids.cpu()  # one copy per step, not per row
        chosen = logits.argmax(-1).tolist()
        for b, row in enumerate(rows):
            if row.request.temperature > 0:
                tempered = torch.softmax(logits[b].double() / row.request.temperature, dim=-1)
                cdf = torch.cumsum(tempered, 0).cpu().numpy()
                chosen[b] = int(min(np.searchsorted(cdf, row.rng.random() * cdf[-1], side="right"), cdf.size - 1))
            row.top_ids.append(top_ids[b])
            row.top_probs.append(top_probs[b])
        return chosen

    def _finish(self, row: _Row, token: int) -> Answer | None:
        """Append `token` (or end on a stop token); the row's Answer once it is done, else None."""
        stopped = token in self.stop
        if stopped:
            row.top_ids.pop()  # the distribution that chose the stop token belongs to no response token
            row.top_probs.pop()
        else:
            row.tokens.append(token)
        if not stopped and len(row.tokens) < self.config.max_new_tokens:
            return None
        k = self.config.top_k
        ids = torch.stack(row.top_ids).numpy().astype(np.int32) if row.top_ids else np.zeros((0, k), np.int32)
        probs = torch.stack(row.top_probs).numpy().astype(np.float16) if row.top_probs else np.zeros((0, k), np.float16)
        return Answer(np.array(row.tokens, dtype=np.int64), ids, probs, stopped)

    # -- the loop ---------------------------------------------------------------------------------------
    def generate(self, requests: Sequence[Request],
                 on_answer: Callable[[int, Answer], None] | None = None) -> list[Answer]:
        """Answers to `requests` in their order; on_answer(index, answer) is called as each one finishes."""
        if not requests:
            return []
        lengths = [len(r.prompt_ids) for r in requests]
        if min(lengths) < 1:
            raise ValueError("a request has an empty prompt: every prompt needs at least one token")
        capacity = max(lengths) + self.config.max_new_tokens
        waiting = deque(range(len(requests)))
        answers: list[Answer | None] = [None] * len(requests)
        cache, slots, next_token = None, [], None

        def settle(row_slots: list[int], chosen: list[int]) -> None:
            for slot, token in zip(row_slots, chosen, strict=True):
                row = slots[slot]
                answer = self._finish(row, token)
                if answer is None:
                    next_token[slot] = token
                    continue
                answers[row.index] = answer
                slots[slot] = None
                if on_answer:
                    on_answer(row.index, answer)

        while waiting or any(s is not None for s in slots):
            free = [i for i, s in enumerate(slots) if s is None]
            if waiting and len(free) == len(slots) and len(slots) < min(self.config.batch, len(waiting)):
                # a fresh (or compacted, now empty) cache: allocate the full batch again
                cache = BatchKVCache(self.decoder, min(self.config.batch, len(waiting)), capacity, self.device)
                slots, next_token = [None] * cache.rows, torch.zeros(cache.rows, dtype=torch.long)
                free = list(range(cache.rows))
            if waiting and free and (self.config.refill or len(free) == len(slots)):
                admitted = free[: len(waiting)]
                chosen = self._prefill(cache, slots, admitted, [waiting.popleft() for _ in admitted], requests)
                settle(admitted, chosen)
                continue
            active = [i for i, s in enumerate(slots) if s is not None]
            draining = not waiting or not self.config.refill
            if draining and len(active) <= 0.75 * len(slots):
                keep = torch.tensor(active, device=self.device)
                cache.keep(keep)
                slots = [slots[i] for i in active]
                next_token = next_token[active].clone()
                active = list(range(len(slots)))
            rows = torch.tensor(active, device=self.device)
            positions = cache.lengths[rows][:, None]
            logits = self._forward(cache, rows, next_token[active][:, None].to(self.device), positions,
                                   torch.zeros(len(active), dtype=torch.long, device=self.device))
            cache.lengths[rows] += 1
            settle(active, self._choose(logits, [slots[i] for i in active]))
        return answers  # type: ignore[return-value]

    def _prefill(self, cache: BatchKVCache, slots: list, free: list[int], indices: list[int],
                 requests: Sequence[Request]) -> list[int]:
        """Write the prompts of `indices` into cache rows `free` (right-padded) and choose their first tokens."""
        prompts = [list(requests[i].prompt_ids) for i in indices]
        width = max(len(p) for p in prompts)
        ids = torch.tensor([p + [p[-1]] * (width - len(p)) for p in prompts], device=self.device)
        positions = torch.arange(width, device=self.device).repeat(len(prompts), 1)
        rows = torch.tensor(free, device=self.device)
        last = torch.tensor([len(p) - 1 for p in prompts], device=self.device)
        logits = self._forward(cache, rows, ids, positions, last)
        cache.lengths[rows] = last + 1  # padded slots past a prompt's end are overwritten by its answer
        for slot, index in zip(free, indices, strict=True):
            request = requests[index]
            rng = np.random.default_rng(request.seed) if request.temperature > 0 else None
            slots[slot] = _Row(index, request, rng)
        return self._choose(logits, [slots[s] for s in free])

"""Held-out τ of a multi-token adapter, cheap enough to run every few hundred training steps.

Training loss and training top-1 kept rising while held-out τ stalled (issue 16: the 27.7k-token adapter
memorised), so k, rank and the sampler head's form are chosen here, on questions the training never saw
and the benchmark does not use: by default Spec-Bench questions 5-6 of each category (the benchmark takes
the first 4 of each; same 1,500-character limit on the first turn), chosen by bench.questions.heldout_turns
(the question file is bench's: this module takes the prompts' text).

The reference is the base model's own greedy answer, which lossless decoding reproduces whatever the
drafts. For the chain layouts τ then follows from ONE teacher-forced pass: decoding step by step, the masks
under owner x_t draft x_{t+2..t+1+k} (the root x_{t+1} is the previous call's own token), each draft of the
sampler head conditioned on the draft before it; while drafts are right those are the true tokens, so the
accepted count is the number of leading masks whose prediction, given the TRUE previous token, is right,
and that is what the training layout (`mask_block_layout`) computes for every owner at once. The step
simulation then walks the answer as the runtime's quadratic layout would (the first call has no drafts,
each call commits its accepted drafts plus its own token; τ = 1 + accepted / calls, as GenerationStats).
The runtime counts a call's accepted drafts before cutting them to the token budget, so the reference
answers run a few tokens past the budget (`tail`) and the last call is counted the same way.

Reported per evaluation:
    tau_chain_<c>   the sampler head's chain, scoring only the top-c tokens of each mask's plain logits as the
                    runtime does (c = 64 by default; "full" = the whole vocabulary)
    tau_plain       the masks' plain logits (argmax), no sampler head: the head's ablation
    tau_top<b>      a bound for tree layouts: a mask counts as right when the true token is among the head's b
                    best (the runtime's tree holds b children per node, but not b^k paths)
    acc_m<j>        top-1 of mask j given the true previous token (the training metric, on held-out text)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from mtpedge.runtime.rope import inverse_frequencies, rope_tables

from .distill_batch import BatchedGenerator, GenerationConfig, Request
from .mtp_adapter import MtpAdapter
from .mtp_layout import IGNORE, causal_bias, mask_block_layout


@dataclass(frozen=True)
class HeldOut:
    """Prompts (chat-templated ids), the base model's greedy answers to them, and how many answer tokens a
    decoding run is given (answers may run past it: see the module docstring)."""

    prompts: list[np.ndarray]
    answers: list[np.ndarray]
    budget: int

    def save(self, path: str | Path) -> None:
        arrays = {f"prompt_{i}": p for i, p in enumerate(self.prompts)}
        arrays.update({f"answer_{i}": a for i, a in enumerate(self.answers)})
        np.savez(path, count=np.int64(len(self.prompts)), budget=np.int64(self.budget), **arrays)

    @classmethod
    def load(cls, path: str | Path) -> HeldOut:
        with np.load(path) as z:
            n = int(z["count"])
            return cls([z[f"prompt_{i}"] for i in range(n)], [z[f"answer_{i}"] for i in range(n)], int(z["budget"]))


def make_heldout(loaded, questions: list[str], max_new_tokens: int = 128, tail: int = 9,
                 device: str = "cpu") -> HeldOut:
    """The base model's greedy answers to `questions` (batched; what lossless decoding will output), `tail`
    tokens past the budget (at least k + 1 for k masks)."""
    prompts = [np.asarray(loaded.tokenizer.apply_chat_template([{"role": "user", "content": q}],
                                                               add_generation_prompt=True, tokenize=True,
                                                               return_dict=False), dtype=np.int64)
               for q in questions]
    generator = BatchedGenerator(loaded.decoder, loaded.stop_token_ids,
                                 GenerationConfig(max_new_tokens=max_new_tokens + tail, batch=len(prompts), top_k=1),
                                 device)
    answers = generator.generate([Request(p.tolist()) for p in prompts])
    return HeldOut(prompts, [a.response_ids for a in answers], max_new_tokens)


def simulate_calls(accepted_at: dict[int, int], prompt_len: int, end: int) -> tuple[int, int]:
    """(calls, accepted drafts) of decoding the answer tokens prompt_len .. end - 1 step by step.

    accepted_at[t]: drafts accepted when owner t's masks draft (t = the last committed token before the root).
    The prefill commits x_P; the first call has no drafts and commits x_{P+1}. A call's drafts count in full
    even where they pass `end` (as the runtime counts them before cutting to the budget).
    """
    calls, accepted, last = 1, 0, prompt_len + 1  # last: index of the newest committed token (the next root)
    while last < end - 1:
        a = accepted_at[last - 1]
        calls, accepted, last = calls + 1, accepted + a, last + a + 1
    return calls, accepted


def _leading(hits: np.ndarray) -> np.ndarray:
    """Per row of (owners, k) booleans: how many leading entries are True."""
    return np.cumprod(hits, axis=1).sum(axis=1)


@torch.no_grad()
def heldout_tau(adapter: MtpAdapter, heldout: HeldOut, candidates: tuple[int, ...] = (64, 0), branch: int = 4
                ) -> dict:
    """τ and per-depth accuracy of `adapter` on `heldout` (see the module docstring)."""
    k = adapter.config.k
    decoder = adapter.decoder
    cfg = decoder.cfg
    device = adapter.masks.device
    inv_freq = inverse_frequencies(cfg.rope, cfg.head_dim)

    def tensor(a: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(a).to(device)

    names = [f"chain_{c or 'full'}" for c in candidates] + ["plain", f"top{branch}"]
    calls = dict.fromkeys(names, 0)
    accepted = dict.fromkeys(names, 0)
    depth_hits, depth_count = np.zeros(k), np.zeros(k)
    for prompt, answer in zip(heldout.prompts, heldout.answers, strict=True):
        if answer.size < 3:
            continue
        tokens = np.concatenate([prompt, answer])
        p_len, t_len = prompt.size, tokens.size
        end = min(t_len, p_len + heldout.budget)
        cos, sin = rope_tables(np.arange(t_len), inv_freq)
        empty = [torch.zeros(1, cfg.num_kv_heads, 0, cfg.head_dim, device=device)] * (2 * cfg.num_layers)
        embeds = decoder.model.embed_tokens(tensor(tokens))[None]
        _, kv = adapter.run(embeds, tensor(causal_bias(t_len)), tensor(cos), tensor(sin), empty, None)
        owners = np.arange(p_len, end - 2)  # every owner a call can draft from (the first call drafts nothing)
        layout = mask_block_layout(tokens, owners, k)
        cos, sin = rope_tables(layout.positions, inv_freq)
        gate = torch.ones(1, layout.positions.size, device=device)
        hidden, _ = adapter.run(adapter.masks.repeat(owners.size, 1)[None], tensor(layout.bias), tensor(cos),
                                tensor(sin), kv, gate)
        hidden = hidden[0]
        plain = adapter.unembed(hidden)  # (N, V)
        sampled = adapter.unembed(adapter.sampler_hidden(tensor(layout.prev_tokens), hidden))
        targets = tensor(layout.targets)
        valid = (layout.targets != IGNORE).reshape(owners.size, k)
        hits = {"plain": (plain.argmax(-1) == targets).cpu().numpy()}
        for c, name in zip(candidates, names, strict=False):
            scores = sampled
            if c and c < scores.shape[-1]:
                shortlist = plain.topk(c, dim=-1).indices
                scores = torch.full_like(sampled, float("-inf")).scatter(1, shortlist, sampled.gather(1, shortlist))
            hits[name] = (scores.argmax(-1) == targets).cpu().numpy()
        top = sampled.topk(branch, dim=-1).indices
        hits[f"top{branch}"] = (top == targets[:, None]).any(-1).cpu().numpy()
        for name in names:
            grid = hits[name].reshape(owners.size, k) & valid
            counts = _leading(grid)
            c_, a_ = simulate_calls(dict(zip(owners.tolist(), counts.tolist(), strict=True)), p_len, end)
            calls[name] += c_
            accepted[name] += a_
        first = hits[names[0]].reshape(owners.size, k)
        depth_hits += (first & valid).sum(0)
        depth_count += valid.sum(0)
    result = {f"tau_{name}": round(1.0 + accepted[name] / max(calls[name], 1), 4) for name in names}
    result.update({f"acc_m{j + 1}": round(float(depth_hits[j] / max(depth_count[j], 1)), 4) for j in range(k)})
    result["questions"] = len(heldout.prompts)
    return result

"""DMTD (direct multi-token decoding, arXiv:2510.11958) on top of the reference decoder.

The L layers are split into "thinking" layers [0, L - D) and the last D "decoding" layers. The decoding layers
see a gated residual stream: `h_dec_in[i] = emb[i] + M[i] * h_think[i]`, M[i] = 1 only at cycle heads, so between
heads they must predict the next token from the token's embedding and their own KV of earlier positions.

What we train (and why it differs from the paper, which trains every non-embedding weight): a *copy* of the
last D layers and the final norm (`DmtdHead`); the base model stays untouched. On 2 CPU cores an hour of training
moves a few hundred thousand tokens, far too few to retrain 135M weights, and keeping the base intact buys two
things: the thinking part is exactly the base's first L - D layers (its hidden states can be computed once per
training sequence and cached), and the bundle still holds the unchanged base model, so `dmtd-spec` drafts with
the trained copy and verifies with the base — lossless against the plain base model, not against a retrained one.

Gate phase: every position of the prompt is a head (inference prefills the prompt through all layers), and
from the prompt's last position on, every τ-th position is a head (where inference refills the thinking layers).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from mtpedge.runtime.rope import inverse_frequencies, rope_tables

from .decoder import Decoder, DecoderLayer, RMSNorm, run_layers

MASK_VALUE = -1e9


@dataclass(frozen=True)
class DmtdSplit:
    num_layers: int  # L of the base model
    decoding_layers: int  # D

    def __post_init__(self) -> None:
        if not 1 <= self.decoding_layers < self.num_layers:
            raise ValueError(f"--decoding-layers must be in [1, {self.num_layers - 1}] for a {self.num_layers}-layer "
                             f"model, got {self.decoding_layers}")

    @property
    def thinking_layers(self) -> int:
        return self.num_layers - self.decoding_layers


class DmtdHead(nn.Module):
    """The trained decoding layers: D decoder layers and a final norm (LM head shared with the base, frozen)."""

    def __init__(self, decoder: Decoder, decoding_layers: int) -> None:
        super().__init__()
        cfg = decoder.cfg
        self.split = DmtdSplit(cfg.num_layers, decoding_layers)
        self.layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(decoding_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        start = self.split.thinking_layers
        for i, layer in enumerate(self.layers):  # start from the base's own last layers
            layer.load_state_dict(decoder.model.layers[start + i].state_dict())
        self.norm.load_state_dict(decoder.model.norm.state_dict())


class CopyGraph(nn.Module):
    """The decoding copy as a D-layer decoder of the graph contract (export/dmtd_bundle.py traces it): its input
    row is a token's embedding, plus the thinking layers' hidden state at a head; the LM head is the base's."""

    def __init__(self, head: DmtdHead, lm_head: nn.Module) -> None:
        super().__init__()
        self.layers, self.norm, self.lm_head = head.layers, head.norm, lm_head

    def forward(self, inputs_embeds, attention_bias, rope_cos, rope_sin, *past):
        h, new_kv = run_layers(self.layers, inputs_embeds, attention_bias, rope_cos, rope_sin, past)
        return (self.lm_head(self.norm(h)), *new_kv)


def cyclic_gate(length: int, tau: int, anchor: int) -> np.ndarray:
    """M as a bool vector: True at every position before `anchor` and at anchor, anchor + τ, anchor + 2τ, ..."""
    if tau < 1:
        raise ValueError(f"the cycle τ must be >= 1, got {tau}")
    positions = np.arange(length)
    return (positions < anchor) | ((positions - anchor) % tau == 0)


class Causal:
    """RoPE tables, causal bias and empty past for a teacher-forced pass of n tokens through decoder layers."""

    def __init__(self, decoder: Decoder, n: int) -> None:
        cfg, device = decoder.cfg, decoder.lm_head.weight.device
        cos, sin = rope_tables(np.arange(n), inverse_frequencies(cfg.rope, cfg.head_dim))
        self.cos, self.sin = torch.from_numpy(cos).to(device), torch.from_numpy(sin).to(device)
        self.bias = torch.triu(torch.full((n, n), MASK_VALUE, device=device), diagonal=1)[None, None]
        self.past = torch.zeros(1, cfg.num_kv_heads, 0, cfg.head_dim, device=device)

    def run(self, layers, h: torch.Tensor) -> torch.Tensor:
        for layer in layers:
            h, _, _ = layer(h, self.bias, self.cos, self.sin, self.past, self.past)
        return h


def embed(decoder: Decoder, ids: np.ndarray) -> torch.Tensor:
    ids = torch.as_tensor(np.asarray(ids, dtype=np.int64), device=decoder.lm_head.weight.device)
    return decoder.model.embed_tokens(ids[None])


@torch.no_grad()
def thinking_hidden(decoder: Decoder, ids: np.ndarray, split: DmtdSplit) -> torch.Tensor:
    """The residual stream entering layer L - D, (1, n, hidden): what the base's thinking layers produce."""
    causal = Causal(decoder, len(ids))
    return causal.run(decoder.model.layers[: split.thinking_layers], embed(decoder, ids))


def dmtd_logits(decoder: Decoder, head: DmtdHead, ids: np.ndarray, h_think: torch.Tensor,
                gate: np.ndarray) -> torch.Tensor:
    """Logits (n, vocab) of the gated pass: the decoding copy sees emb + M * h_think."""
    emb = embed(decoder, ids)
    mask = torch.from_numpy(gate.astype(np.float32)).to(emb.device)[None, :, None]
    h = Causal(decoder, len(ids)).run(head.layers, emb + mask * h_think)
    return decoder.lm_head(head.norm(h))[0]


@torch.no_grad()
def base_logits(decoder: Decoder, ids: np.ndarray, h_think: torch.Tensor, split: DmtdSplit) -> torch.Tensor:
    """Logits (n, vocab) of the unchanged base model, continuing from its thinking hidden states."""
    h = Causal(decoder, len(ids)).run(decoder.model.layers[split.thinking_layers:], h_think)
    return decoder.lm_head(decoder.model.norm(h))[0]


@torch.no_grad()
def perplexities(decoder: Decoder, head: DmtdHead, ids: np.ndarray, taus: tuple[int, ...],
                 anchor: int) -> dict[str, float]:
    """Teacher-forced perplexity of the tokens after position `anchor`: base, and DMTD at each τ.

    The first `anchor` tokens act as the prompt (all heads); from `anchor` on the gate is cyclic.
    """
    ids = np.asarray(ids, dtype=np.int64)
    h_think = thinking_hidden(decoder, ids, head.split)
    targets = torch.from_numpy(ids[anchor + 1:]).to(h_think.device)

    def ppl(logits: torch.Tensor) -> float:
        loss = torch.nn.functional.cross_entropy(logits[anchor:-1], targets)
        return float(torch.exp(loss))

    out = {"base": ppl(base_logits(decoder, ids, h_think, head.split))}
    with torch.no_grad():
        for tau in taus:
            out[f"tau{tau}"] = ppl(dmtd_logits(decoder, head, ids, h_think, cyclic_gate(len(ids), tau, anchor)))
    return out

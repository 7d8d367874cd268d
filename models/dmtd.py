"""DMTD (direct multi-token decoding, arXiv:2510.11958) as a trained drafter beside the unchanged base model.

The paper splits the L layers into thinking layers and the last D decoding layers, and retrains all of them
so that the decoding layers can emit τ tokens per pass of the thinking layers: at a cycle head the decoding
layers take the thinking layers' output, between heads only the token's embedding (the cyclic gate
`M·h_think + (1 − M)·emb`, M = 1 at heads), attending to their own KV of earlier positions.

Here the base model stays exact (so that `dmtd-spec` verifies against the unchanged model) and the DMTD model
is a trained copy of the base's last m + D layers:

    frozen prefix   layers [0, T), T = L − D − m: the base's own; the bundle's graphs tap their output (`tap`)
    thinking copy   m trained layers [T, L − D): the part of the thinking layers that learns to carry the next
                    τ tokens in the head's state (the paper trains every thinking layer; these are the ones
                    the drafter refills, so their cost is paid once per step, batched)
    decoding copy   D trained layers [L − D, L) + their final norm; the LM head is the base's, frozen

Each copied projection carries a LoRA update (its own norms are trained whole); with the LoRA at zero the copy
IS the base model's layers, so an untrained DMTD model with M = 1 everywhere is exactly the base model. Rank 0
trains every weight of the copy instead, as the paper trains its layers (the copy starts as the base's layers
too); the shipped file then holds the copy's weights, not factors.

Inference refills fully: at a head, the thinking copy runs over the τ tokens of the cycle (their tapped states
came from the base call that verified or scored them) and the decoding copy re-runs them as heads, so every
position before the current cycle is a head in every trained layer's KV. Only the current cycle's tokens are
decoded from embeddings alone. (The paper keeps the emb-only KV of earlier cycles; re-running them as heads
costs one batched decoding-copy call per cycle and gives the later tokens more to attend to, and it makes the
lossless drafter, whose past is all verified heads, the same computation as the lossy one.)

Training computes exactly that in one teacher-forced pass with two streams through the decoding copy:
    head stream    every position, input the thinking copy's output (what the position gives once a head);
    draft stream   every non-head position q of a cycle whose head is w(q): input emb(x_q), attending to the
                   head stream up to w(q) and to the draft stream of its own cycle up to q.
Row q of the result is what inference computes at position q: the head stream at heads, the draft stream
elsewhere.
"""

from __future__ import annotations

import copy
from dataclasses import asdict, dataclass

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from mtpedge.runtime.rope import inverse_frequencies, rope_tables

from .decoder import Decoder, DecoderLayer, run_layers

MASK_VALUE = -1e9
PROJECTIONS = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj",
               "mlp.up_proj", "mlp.down_proj")


@dataclass(frozen=True)
class DmtdConfig:
    # D. 6 of SmolLM2's 30 (the paper's share: 8 of 36). Equal steps from scratch, held-out dmtd-spec τ at 600 steps
    # for D = 2 / 4 / 6 / 8: 1.163 / 1.276 / 1.366 / 1.411, where every weight of D = 2 (rank 0) gave 1.164 and 6
    # thinking layers 1.190 (benchmarks/results/dmtd/session24/ablation-600.json); 8 costs a third more per draft
    decoding_layers: int = 6
    thinking_layers: int = 2  # m: trained thinking layers just before the decoding ones
    lora_rank: int = 32  # 0: every weight of the copy trains (no LoRA)
    lora_alpha: float = 32.0

    def __post_init__(self) -> None:
        if self.decoding_layers < 1 or self.thinking_layers < 0 or self.lora_rank < 0:
            raise ValueError(f"DMTD needs D >= 1 decoding layers, m >= 0 thinking layers and a LoRA rank >= 0, "
                             f"got D = {self.decoding_layers}, m = {self.thinking_layers}, rank = {self.lora_rank}")

    def tap_layer(self, num_layers: int) -> int:
        """T: the first trained layer, whose input the base graphs hand over (`layer_hidden`)."""
        tap = num_layers - self.decoding_layers - self.thinking_layers
        if tap < 1:
            raise ValueError(f"D + m = {self.decoding_layers + self.thinking_layers} trained layers leave no frozen "
                             f"layer in a {num_layers}-layer model: lower --decoding-layers or --thinking-layers")
        return tap

    def to_dict(self) -> dict:
        return asdict(self)


class LoRALinear(nn.Module):
    """A frozen linear layer plus a trained low-rank update: W x + (alpha / rank) B A x."""

    def __init__(self, base: nn.Linear, rank: int, alpha: float, generator: torch.Generator) -> None:
        super().__init__()
        self.weight = base.weight  # frozen (requires_grad off) by the caller
        self.bias = base.bias
        self.scale = alpha / rank
        self.lora_A = nn.Parameter(torch.empty(rank, base.in_features))
        self.lora_B = nn.Parameter(torch.zeros(base.out_features, rank))  # zero: the copy starts as the base
        nn.init.kaiming_uniform_(self.lora_A, a=5**0.5, generator=generator)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight, self.bias) + F.linear(F.linear(x, self.lora_A), self.lora_B) * self.scale

    @torch.no_grad()
    def merged(self) -> nn.Linear:
        """A plain linear layer with the update folded in (what the exported graphs hold)."""
        out = nn.Linear(self.weight.shape[1], self.weight.shape[0], bias=self.bias is not None)
        out.weight.copy_(self.weight + self.scale * self.lora_B @ self.lora_A)
        if self.bias is not None:
            out.bias.copy_(self.bias)
        return out


def _lora_copy(layer: DecoderLayer, config: DmtdConfig, generator: torch.Generator) -> DecoderLayer:
    """A copy of a base layer whose projections carry LoRA and whose norms train whole (rank 0: all of it trains)."""
    new = copy.deepcopy(layer)
    for p in new.parameters():
        p.requires_grad_(config.lora_rank == 0)
    if config.lora_rank == 0:
        return new
    for name in PROJECTIONS:
        parent_name, attr = name.split(".")
        parent = getattr(new, parent_name)
        setattr(parent, attr, LoRALinear(getattr(parent, attr), config.lora_rank, config.lora_alpha, generator))
    for norm in (new.input_layernorm, new.post_attention_layernorm):
        norm.weight.requires_grad_(True)
    return new


def _merged_copy(layer: DecoderLayer) -> DecoderLayer:
    new = copy.deepcopy(layer)
    for name in PROJECTIONS:
        parent_name, attr = name.split(".")
        parent = getattr(new, parent_name)
        if isinstance(getattr(parent, attr), LoRALinear):
            setattr(parent, attr, getattr(parent, attr).merged())
    return new


class DmtdModel(nn.Module):
    """The trained copy of the base's last m + D layers (thinking copy, decoding copy, final norm).

    The LM head stays the base's and is passed in where it is needed, so that this module's parameters are
    only what DMTD adds (and trains). The LoRA factors' random start is drawn from `seed`.
    """

    def __init__(self, decoder: Decoder, config: DmtdConfig, seed: int = 0) -> None:
        super().__init__()
        self.config = config
        num_layers = decoder.cfg.num_layers
        self.tap = config.tap_layer(num_layers)
        first_decoding = num_layers - config.decoding_layers
        generator = torch.Generator().manual_seed(seed)
        self.think = nn.ModuleList(_lora_copy(decoder.model.layers[i], config, generator)
                                   for i in range(self.tap, first_decoding))
        self.decode = nn.ModuleList(_lora_copy(decoder.model.layers[i], config, generator)
                                    for i in range(first_decoding, num_layers))
        self.norm = copy.deepcopy(decoder.model.norm)
        self.norm.weight.requires_grad_(True)

    def trainable_state(self) -> dict[str, torch.Tensor]:
        """What training changes (LoRA factors and norms): all a checkpoint or the shipped file needs."""
        return {name: p.detach() for name, p in self.named_parameters() if p.requires_grad}

    def load_trainable_state(self, state: dict[str, torch.Tensor]) -> None:
        own = {name: p for name, p in self.named_parameters() if p.requires_grad}
        if set(own) != set(state) or any(own[k].shape != state[k].shape for k in own):
            missing, extra = sorted(set(own) - set(state)), sorted(set(state) - set(own))
            raise ValueError(f"DMTD weights do not fit this configuration (missing {missing[:3]}, unexpected "
                             f"{extra[:3]}, or shapes differ): use the D, m and rank they were trained with")
        with torch.no_grad():
            for name, value in state.items():
                own[name].copy_(value.to(own[name].dtype))

    def start_from(self, other: DmtdModel) -> None:
        """Take another DMTD model's trained weights as this one's start: the same configuration loads them as
        they are; a rank-0 model takes the other's layers with its LoRA folded in (LoRA to full training)."""
        if other.config == self.config:
            self.load_trainable_state(other.trainable_state())
            return
        if self.config.lora_rank != 0 or (other.config.decoding_layers, other.config.thinking_layers) != \
                (self.config.decoding_layers, self.config.thinking_layers):
            raise ValueError(f"a DMTD model trained with {other.config.to_dict()} can start only a run of the same "
                             f"configuration, or of the same layers at rank 0 (--rank 0), not {self.config.to_dict()}")
        think, decode = other.merged_layers()
        with torch.no_grad():
            for mine, theirs in zip([*self.think, *self.decode], [*think, *decode], strict=True):
                mine.load_state_dict(theirs.state_dict())
            self.norm.load_state_dict(other.norm.state_dict())

    def merged_layers(self) -> tuple[list[DecoderLayer], list[DecoderLayer]]:
        """(thinking copy, decoding copy) as plain decoder layers with the LoRA folded in, for export."""
        return [_merged_copy(layer) for layer in self.think], [_merged_copy(layer) for layer in self.decode]


# -- teacher-forced passes -----------------------------------------------------------------------------------

def draft_windows(length: int, tau: int, anchor: int) -> np.ndarray:
    """w(q): the head whose cycle position q belongs to. Every position up to `anchor` (the prompt) is a head;
    from anchor on, one in τ: anchor, anchor + τ, ... Position q is a head iff w(q) == q."""
    if tau < 1:
        raise ValueError(f"the cycle τ must be >= 1, got {tau}")
    positions = np.arange(length)
    return np.where(positions <= anchor, positions, anchor + (positions - anchor) // tau * tau)


def _rope(decoder: Decoder, positions: np.ndarray, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    cos, sin = rope_tables(positions, inverse_frequencies(decoder.cfg.rope, decoder.cfg.head_dim))
    return torch.from_numpy(cos).to(device), torch.from_numpy(sin).to(device)


def _bias(visible: np.ndarray, device: torch.device) -> torch.Tensor:
    return torch.where(torch.from_numpy(visible).to(device), 0.0, MASK_VALUE)[None, None]


def run_causal(decoder: Decoder, layers, h: torch.Tensor) -> torch.Tensor:
    """h (1, n, hidden) through `layers` with plain causal attention (positions 0 .. n - 1)."""
    n, device = h.shape[1], h.device
    cos, sin = _rope(decoder, np.arange(n), device)
    bias = _bias(np.tril(np.ones((n, n), dtype=bool)), device)
    past = torch.zeros(1, decoder.cfg.num_kv_heads, 0, decoder.cfg.head_dim, device=device)
    return run_layers(layers, h, bias, cos, sin, [past] * (2 * len(layers)))[0]


def embed(decoder: Decoder, ids: np.ndarray) -> torch.Tensor:
    ids = torch.as_tensor(np.asarray(ids, dtype=np.int64), device=decoder.lm_head.weight.device)
    return decoder.model.embed_tokens(ids[None])


@torch.no_grad()
def tapped_states(decoder: Decoder, ids: np.ndarray, tap: int) -> torch.Tensor:
    """The residual stream entering layer `tap`, (1, n, hidden): what the base graphs' `layer_hidden` gives."""
    return run_causal(decoder, decoder.model.layers[:tap], embed(decoder, ids))


def two_stream_visibility(windows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(draft positions, visible (n + r, n + r)) of the two-stream pass; rows/columns [0, n) are the head stream,
    [n, n + r) the draft stream at the r non-head positions."""
    n = windows.size
    positions = np.arange(n)
    drafts = np.flatnonzero(windows != positions)
    query_pos = np.concatenate([positions, drafts])
    query_window = np.concatenate([positions, windows[drafts]])  # a head-stream row sees heads up to itself
    is_draft = np.concatenate([np.zeros(n, bool), np.ones(drafts.size, bool)])
    sees_head = positions[None, :] <= query_window[:, None]  # (rows, n)
    sees_draft = (is_draft[:, None] & (windows[drafts][None, :] == query_window[:, None])
                  & (drafts[None, :] <= query_pos[:, None]))  # (rows, r): own cycle, up to itself
    return drafts, np.concatenate([sees_head, sees_draft], axis=1)


def dmtd_hidden(decoder: Decoder, model: DmtdModel, ids: np.ndarray, tapped: torch.Tensor,
                windows: np.ndarray) -> torch.Tensor:
    """Final-normed hidden rows (n, hidden) of the gated pass: row q is what inference computes at position q."""
    h_think = tapped
    if len(model.think):
        h_think = run_causal(decoder, model.think, tapped)
    drafts, visible = two_stream_visibility(windows)
    device = tapped.device
    x = torch.cat([h_think, embed(decoder, np.asarray(ids)[drafts])], dim=1)  # gate: heads h_think, drafts emb
    cos, sin = _rope(decoder, np.concatenate([np.arange(windows.size), drafts]), device)
    bias = _bias(visible, device)
    past = torch.zeros(1, decoder.cfg.num_kv_heads, 0, decoder.cfg.head_dim, device=device)
    for layer in model.decode:
        x, _, _ = layer(x, bias, cos, sin, past, past)
    n = windows.size
    rows = torch.arange(n, device=device)
    rows[torch.from_numpy(drafts).to(device)] = n + torch.arange(drafts.size, device=device)
    return model.norm(x[0, rows])


def dmtd_logits(decoder: Decoder, model: DmtdModel, ids: np.ndarray, tapped: torch.Tensor,
                windows: np.ndarray) -> torch.Tensor:
    return decoder.lm_head(dmtd_hidden(decoder, model, ids, tapped, windows))


@torch.no_grad()
def base_logits(decoder: Decoder, tapped: torch.Tensor, tap: int) -> torch.Tensor:
    """The unchanged base model's logits (n, vocab), continuing from its tapped states."""
    h = run_causal(decoder, decoder.model.layers[tap:], tapped)
    return decoder.lm_head(decoder.model.norm(h))[0]


# -- graph modules (export/dmtd_bundle.py traces them; contract: runtime/contract.py) --------------------------

class ThinkingGraph(nn.Module):
    """The thinking copy as a headless graph: tapped states in, its output residual stream (`layer_hidden`) out."""

    def __init__(self, layers: list[DecoderLayer]) -> None:
        super().__init__()
        self.layers = nn.ModuleList(layers)

    def forward(self, inputs_embeds, attention_bias, rope_cos, rope_sin, cache_slots, *past):
        h, new_kv = run_layers(self.layers, inputs_embeds, attention_bias, rope_cos, rope_sin, past, cache_slots)
        return (h, *new_kv)


class DecodingGraph(nn.Module):
    """The decoding copy + final norm + an LM head (the base's, or its rows for a shortlist of tokens): a row is
    the thinking copy's output at a head, a token's embedding elsewhere."""

    def __init__(self, layers: list[DecoderLayer], norm: nn.Module, lm_weight: torch.Tensor) -> None:
        super().__init__()
        self.layers, self.norm = nn.ModuleList(layers), norm
        self.lm_weight = nn.Parameter(lm_weight.detach().clone(), requires_grad=False)

    def forward(self, inputs_embeds, attention_bias, rope_cos, rope_sin, cache_slots, *past):
        h, new_kv = run_layers(self.layers, inputs_embeds, attention_bias, rope_cos, rope_sin, past, cache_slots)
        return (F.linear(self.norm(h), self.lm_weight), *new_kv)

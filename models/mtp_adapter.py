"""The gated-LoRA multi-token adapter (methods.md section 2, Apple's "Your LLM Knows the Future").

Three trainable parts on a frozen `Decoder`:
    masks    k learned mask embeddings (k, hidden): mask j after token x_i forecasts x_{i+1+j+1}
    lora     gated LoRA on the decoder's linear layers: y = W x + g * B(A x) * scale, g = 1 at mask slots and
             0 at token slots, so a token slot computes exactly the base model (bit for bit: 0 * finite = 0)
    sampler  a 2-layer MLP over [embedding of the previous token; mask hidden], then the model's own
             unembedding, in one of two forms (`MtpConfig.sampler_form`):
               residual  (default, what the runtime reads) h + W2 norm(silu(W1 [e; h])), zero-initialised W2:
                         it starts as the plain mask logits and a few hundred CPU steps only learn a correction;
               paper     the paper's two blocks, norm(silu(W2 norm(silu(W1 [e; h])))): no skip path, so it
                         must learn the whole mapping; kept to be measured against the residual form by
                         held-out τ (models/mtp_eval.py). Both forms export and decode.

rank 0 and sampler off gives rung 0 of issue 6: learned mask embeddings alone, usable by the ESP drafter.

The base modules are not changed: `attach_lora` swaps each target `nn.Linear` for a `GatedLoRALinear` that
holds the SAME weight/bias parameters under the same names (state-dict names stay transformers'), plus
lora_A / lora_B. Which slots are gated is a per-call tensor held by one shared `GateHolder`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import nn

from .decoder import Decoder, RMSNorm, run_layers

LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
SAMPLER_FORMS = ("residual", "paper")


@dataclass(frozen=True)
class MtpConfig:
    k: int = 3  # mask slots per token (drafts per step)
    rank: int = 16  # LoRA rank; 0 = no LoRA (learned masks alone, or masks + sampler)
    alpha: float = 32.0  # LoRA scale = alpha / rank
    sampler: bool = True  # train the sampler head
    sampler_form: str = "residual"  # residual | paper (see the module docstring)

    def __post_init__(self) -> None:
        if self.k < 1:
            raise ValueError(f"k (mask slots) must be >= 1, got {self.k}")
        if self.rank < 0:
            raise ValueError(f"the LoRA rank must be >= 0, got {self.rank}")
        if self.sampler_form not in SAMPLER_FORMS:
            raise ValueError(f"sampler form {self.sampler_form!r} is not one of {', '.join(SAMPLER_FORMS)}")

    def to_dict(self) -> dict:
        return asdict(self)


class GateHolder:
    """The gate of the current forward call, shared by every gated linear layer: (1, N) or None (= all 0)."""

    def __init__(self) -> None:
        self.value: torch.Tensor | None = None


class GatedLoRALinear(nn.Module):
    """A frozen linear layer plus a low-rank update applied only where the gate is 1."""

    def __init__(self, base: nn.Linear, rank: int, scale: float, gate: GateHolder) -> None:
        super().__init__()
        self.weight = base.weight  # the same Parameter objects: names and values stay the base model's
        self.bias = base.bias
        self.scale = scale
        self.gate = gate
        self.lora_A = nn.Parameter(torch.empty(rank, base.in_features))
        self.lora_B = nn.Parameter(torch.zeros(base.out_features, rank))  # zero: the adapter starts as the base
        nn.init.kaiming_uniform_(self.lora_A, a=5**0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.linear(x, self.weight, self.bias)
        gate = self.gate.value
        if gate is None:
            return y
        low = (x @ self.lora_A.t()) * gate.unsqueeze(-1)  # gating the rank-r product: cheaper than gating y
        # the scale on the weights: an exported graph folds it into its initializer (one Mul less per projection)
        return y + low @ (self.lora_B * self.scale).t()


class SamplerHead(nn.Module):
    """h' = h + W2 norm(silu(W1 [e_prev; h])); logits = unembed(h'). Zero W2: starts as the plain mask logits."""

    def __init__(self, hidden: int, eps: float) -> None:
        super().__init__()
        self.fc1 = nn.Linear(2 * hidden, hidden)
        self.norm = RMSNorm(hidden, eps)
        self.fc2 = nn.Linear(hidden, hidden)
        nn.init.zeros_(self.fc2.weight)
        nn.init.zeros_(self.fc2.bias)

    def forward(self, prev_embedding: torch.Tensor, mask_hidden: torch.Tensor) -> torch.Tensor:
        u = self.norm(F.silu(self.fc1(torch.cat([prev_embedding, mask_hidden], dim=-1))))
        return mask_hidden + self.fc2(u)


class PaperSamplerHead(nn.Module):
    """The paper's head (methods.md 2.4): two blocks of Linear -> SiLU -> RMSNorm over [e_prev; h]."""

    def __init__(self, hidden: int, eps: float) -> None:
        super().__init__()
        self.fc1 = nn.Linear(2 * hidden, hidden)
        self.norm1 = RMSNorm(hidden, eps)
        self.fc2 = nn.Linear(hidden, hidden)
        self.norm2 = RMSNorm(hidden, eps)

    def forward(self, prev_embedding: torch.Tensor, mask_hidden: torch.Tensor) -> torch.Tensor:
        u = self.norm1(F.silu(self.fc1(torch.cat([prev_embedding, mask_hidden], dim=-1))))
        return self.norm2(F.silu(self.fc2(u)))


class MtpAdapter(nn.Module):
    """The trainable parts, attached to a (frozen) decoder."""

    def __init__(self, decoder: Decoder, config: MtpConfig) -> None:
        super().__init__()
        self.config = config
        self.decoder = decoder
        for p in decoder.parameters():
            p.requires_grad_(False)
        cfg = decoder.cfg
        table = decoder.model.embed_tokens.weight.detach()
        # the vocabulary mean: the best training-free init measured on SmolLM2 ("mean" in mask_embeddings)
        self.masks = nn.Parameter(table.mean(dim=0, keepdim=True).repeat(config.k, 1).clone())
        self.gate = GateHolder()
        self.lora = nn.ModuleDict()
        if config.rank:
            self.lora = attach_lora(decoder, config.rank, config.alpha / config.rank, self.gate)
        head = {"residual": SamplerHead, "paper": PaperSamplerHead}[config.sampler_form]
        self.sampler = head(cfg.hidden_size, cfg.rms_norm_eps) if config.sampler else None

    def trainable_state(self) -> dict[str, torch.Tensor]:
        """Only what training changes (the adapter file): masks, LoRA factors, sampler head."""
        return {name: p.detach().clone() for name, p in self.named_parameters() if p.requires_grad}

    def load_trainable_state(self, state: dict[str, torch.Tensor]) -> None:
        own = dict(self.named_parameters())
        wanted = {name for name, p in own.items() if p.requires_grad}
        if set(state) != wanted:
            missing, extra = sorted(wanted - set(state)), sorted(set(state) - wanted)
            raise ValueError(f"adapter state does not fit this configuration (missing {missing[:3]}, "
                             f"unexpected {extra[:3]}): use the k / rank / sampler settings it was trained with")
        with torch.no_grad():
            for name, value in state.items():
                own[name].copy_(value)

    def run(self, embeds, bias, cos, sin, past, gate: torch.Tensor | None, cache_slots=None):
        """One decoder call: (final-normed hidden (1, N, d), new K/V list); gate (1, N) or None (= base)."""
        self.gate.value = gate
        try:
            h, new_kv = run_layers(self.decoder.model.layers, embeds, bias, cos, sin, past, cache_slots)
            return self.decoder.model.norm(h), new_kv
        finally:
            self.gate.value = None

    def unembed(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.decoder.lm_head(hidden)

    def sampler_hidden(self, prev_tokens: torch.Tensor, mask_hidden: torch.Tensor) -> torch.Tensor:
        if self.sampler is None:
            return mask_hidden
        return self.sampler(self.decoder.model.embed_tokens(prev_tokens), mask_hidden)


def attach_lora(decoder: Decoder, rank: int, scale: float, gate: GateHolder) -> nn.ModuleDict:
    """Swap every target linear layer of `decoder` for a gated one (in place); returns them by a flat name."""
    wrapped = nn.ModuleDict()
    for layer_index, layer in enumerate(decoder.model.layers):
        for parent in (layer.self_attn, layer.mlp):
            for name in LORA_TARGETS:
                base = getattr(parent, name, None)
                if isinstance(base, nn.Linear):
                    module = GatedLoRALinear(base, rank, scale, gate)
                    setattr(parent, name, module)
                    wrapped[f"{layer_index}_{name}"] = module
    return wrapped


class AdapterGraphModule(nn.Module):
    """The graph contract with the adapter's extra I/O (for tracing):
    forward(inputs_embeds, attention_bias, rope_cos, rope_sin, cache_slots, lora_gate, *past)
        -> (logits, hidden_states, *new_kv)
    hidden_states are the final-normed hidden rows, the sampler head's input."""

    def __init__(self, adapter: MtpAdapter) -> None:
        super().__init__()
        self.adapter = adapter

    def forward(self, inputs_embeds, attention_bias, rope_cos, rope_sin, cache_slots, lora_gate, *past):
        gate = lora_gate if self.adapter.config.rank else None
        hidden, new_kv = self.adapter.run(inputs_embeds, attention_bias, rope_cos, rope_sin, past, gate, cache_slots)
        return (self.adapter.unembed(hidden), hidden, *new_kv)

"""A plain PyTorch LLaMA / Qwen2 / Qwen3 decoder that speaks the graph contract directly.

Why our own ~150 lines instead of wrapping transformers' modules: the exported graph must take host-side
embeddings, an additive bias, host RoPE tables and a fixed-size past, and return only the new K/V rows.
transformers' modules own their cache objects, masks and rotary tables, and tracing them into that shape
means fighting each. Parameter names follow transformers (`model.layers.0.self_attn.q_proj.weight`), so a
transformers state dict loads as is, and tests compare this module with transformers' own forward.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from mtpedge.runtime.model_config import DecoderConfig


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate (1, H, N, D) by (1, 1, N, D/2) tables, pairing dimension i with i + D/2 (HF convention)."""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


class Attention(nn.Module):
    def __init__(self, cfg: DecoderConfig) -> None:
        super().__init__()
        self.cfg = cfg
        q_dim, kv_dim = cfg.num_heads * cfg.head_dim, cfg.num_kv_heads * cfg.head_dim
        self.q_proj = nn.Linear(cfg.hidden_size, q_dim, bias=cfg.qkv_bias)
        self.k_proj = nn.Linear(cfg.hidden_size, kv_dim, bias=cfg.qkv_bias)
        self.v_proj = nn.Linear(cfg.hidden_size, kv_dim, bias=cfg.qkv_bias)
        self.o_proj = nn.Linear(q_dim, cfg.hidden_size, bias=False)
        if cfg.qk_norm:
            self.q_norm = RMSNorm(cfg.head_dim, cfg.rms_norm_eps)
            self.k_norm = RMSNorm(cfg.head_dim, cfg.rms_norm_eps)

    def forward(self, x, bias, cos, sin, past_key, past_value, slots=None):
        """slots None: the block attends over the past and then its own keys (training: an empty past);
        slots (1, N) int64: the graph contract (runtime/contract.py), row i's K/V placed at cache column slots[i]
        of a copy of the past before attending over its C columns, where plain decoding will later find them."""
        cfg = self.cfg
        n = x.shape[1]
        q = self.q_proj(x).view(1, n, cfg.num_heads, cfg.head_dim)
        k = self.k_proj(x).view(1, n, cfg.num_kv_heads, cfg.head_dim)
        v = self.v_proj(x).view(1, n, cfg.num_kv_heads, cfg.head_dim)
        if cfg.qk_norm:
            q, k = self.q_norm(q), self.k_norm(k)
        q = apply_rope(q.transpose(1, 2), cos, sin)  # (1, H, N, D)
        k = apply_rope(k.transpose(1, 2), cos, sin)  # (1, Hkv, N, D)
        v = v.transpose(1, 2)
        # Grouped-query attention: query heads are grouped under their KV head (no repeat of K/V), so the
        # score matrix has group * N rows even at N = 1, which keeps onnxruntime on one GEMM kernel for every width.
        group = cfg.num_heads // cfg.num_kv_heads
        q = q.reshape(1, cfg.num_kv_heads, group * n, cfg.head_dim) * cfg.head_dim**-0.5
        if slots is None:
            keys, values = torch.cat([past_key, k], dim=2), torch.cat([past_value, v], dim=2)
        else:
            index = slots.view(1, 1, n, 1).expand(1, cfg.num_kv_heads, n, cfg.head_dim)
            keys, values = past_key.scatter(2, index, k), past_value.scatter(2, index, v)
        scores = (q @ keys.transpose(-1, -2)).view(1, cfg.num_kv_heads, group, n, -1) + bias.unsqueeze(2)
        probs = torch.softmax(scores, dim=-1).view(1, cfg.num_kv_heads, group * n, -1)
        out = probs @ values  # (1, Hkv, gN, D)
        out = out.view(1, cfg.num_heads, n, cfg.head_dim).transpose(1, 2).reshape(1, n, cfg.num_heads * cfg.head_dim)
        return self.o_proj(out), k, v


class MLP(nn.Module):
    def __init__(self, cfg: DecoderConfig) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.up_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, cfg: DecoderConfig) -> None:
        super().__init__()
        self.self_attn = Attention(cfg)
        self.mlp = MLP(cfg)
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)

    def forward(self, h, bias, cos, sin, past_key, past_value, slots=None):
        attn, k, v = self.self_attn(self.input_layernorm(h), bias, cos, sin, past_key, past_value, slots)
        h = h + attn
        h = h + self.mlp(self.post_attention_layernorm(h))
        return h, k, v


class Backbone(nn.Module):
    def __init__(self, cfg: DecoderConfig) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.num_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)


class Decoder(nn.Module):
    """forward(inputs_embeds, attention_bias, rope_cos, rope_sin, cache_slots, *past) -> (logits, *new_kv).

    `past` is past_key_0, past_value_0, past_key_1, ... ; the outputs follow the same interleaving.
    The output matrix is always its own parameter (untied), so quantizers see the largest matrix.
    """

    def __init__(self, cfg: DecoderConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.model = Backbone(cfg)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)

    def forward(self, inputs_embeds, attention_bias, rope_cos, rope_sin, cache_slots, *past):
        h, new_kv = run_layers(self.model.layers, inputs_embeds, attention_bias, rope_cos, rope_sin, past, cache_slots)
        return (self.lm_head(self.model.norm(h)), *new_kv)


def run_layers(layers, h, attention_bias, rope_cos, rope_sin, past, cache_slots=None
               ) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """h through `layers` in order, each reading its (past_key, past_value) pair from `past`; (h, new K/V list).
    cache_slots: see Attention.forward."""
    new_kv = []
    for i, layer in enumerate(layers):
        h, k, v = layer(h, attention_bias, rope_cos, rope_sin, past[2 * i], past[2 * i + 1], cache_slots)
        new_kv += [k, v]
    return h, new_kv


class TappedDecoder(nn.Module):
    """The decoder with one more output after the logits: the residual stream entering layer `tap_layer`."""

    def __init__(self, decoder: Decoder, tap_layer: int) -> None:
        super().__init__()
        self.decoder, self.tap_layer = decoder, tap_layer

    def forward(self, inputs_embeds, attention_bias, rope_cos, rope_sin, cache_slots, *past):
        layers, t = self.decoder.model.layers, self.tap_layer
        tapped, kv_low = run_layers(layers[:t], inputs_embeds, attention_bias, rope_cos, rope_sin, past[: 2 * t],
                                    cache_slots)
        h, kv_high = run_layers(layers[t:], tapped, attention_bias, rope_cos, rope_sin, past[2 * t:], cache_slots)
        return (self.decoder.lm_head(self.decoder.model.norm(h)), tapped, *kv_low, *kv_high)

"""A LLaMA / Qwen2 / Qwen3 GGUF file as the reference decoder needs it: config, float32 weights, tokenizer.

`gguf_file.GGUFFile` parses the file once; this module maps llama.cpp's names and layout onto the Hugging Face
ones `Decoder` uses: llama.cpp stores LLaMA's q and k rows permuted for its rotary kernel (its converter's
`permute`), so they are put back here, and the byte-level BPE tokenizer is rebuilt from the vocabulary and
merges in the metadata. A sentencepiece vocabulary is left to transformers (`unsupported_reason` says which
path a file takes). Rope scaling other than linear is refused: transformers' GGUF reader (5.x) drops
`{arch}.rope.scaling.*` and `rope_freqs` for these architectures, so such a file loaded there would silently
run with unscaled rotary frequencies.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from gguf import GGMLQuantizationType, dequantize

from mtpedge.runtime.model_config import SUPPORTED_ARCHITECTURES, DecoderConfig, RopeConfig

from . import gguf_tokenizer
from .gguf_file import GGUFFile

# llama.cpp's tensor names -> the Hugging Face names `Decoder.state_dict()` uses ({i}: the layer)
GLOBAL_NAMES = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
                "output.weight": "lm_head.weight"}
LAYER_NAMES = {
    "attn_norm.weight": "input_layernorm.weight", "ffn_norm.weight": "post_attention_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight", "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight", "attn_output.weight": "self_attn.o_proj.weight",
    "attn_q.bias": "self_attn.q_proj.bias", "attn_k.bias": "self_attn.k_proj.bias",
    "attn_v.bias": "self_attn.v_proj.bias", "attn_q_norm.weight": "self_attn.q_norm.weight",
    "attn_k_norm.weight": "self_attn.k_norm.weight", "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight", "ffn_down.weight": "mlp.down_proj.weight",
}

class UnsupportedGGUF(ValueError):
    """A well-formed GGUF file that describes something the reference decoder cannot run."""


def unsupported_reason(gguf: GGUFFile) -> str | None:
    """Why this module cannot load the file itself (transformers then does), or None."""
    arch = gguf.metadata.get("general.architecture")
    if arch not in SUPPORTED_ARCHITECTURES:
        return f"architecture {arch!r}"
    return gguf_tokenizer.unsupported_reason(gguf)


def rope_from_gguf(gguf: GGUFFile, arch: str) -> RopeConfig:
    """Rotary settings: plain or linearly scaled; anything else is refused rather than run unscaled."""
    theta = float(gguf.metadata.get(f"{arch}.rope.freq_base", 10000.0))
    if "rope_freqs.weight" in gguf.tensors:
        raise UnsupportedGGUF(
            f"{gguf.path} carries per-dimension rotary frequencies (rope_freqs: Llama 3.1-style scaling), which "
            "cannot be mapped back onto the scaling's settings: export the model's Hugging Face folder instead")
    scaling = gguf.metadata.get(f"{arch}.rope.scaling.type", "none")
    if scaling == "none":
        return RopeConfig(theta=theta)
    if scaling == "linear":
        return RopeConfig(theta=theta, rope_type="linear",
                          factor=float(gguf.metadata[f"{arch}.rope.scaling.factor"]))
    raise UnsupportedGGUF(f"{gguf.path}: rope scaling {scaling!r} is not supported (none and linear are): export "
                          "the model's Hugging Face folder instead")


def config_from_gguf(gguf: GGUFFile) -> DecoderConfig:
    """The decoder's shape from llama.cpp's metadata keys (`{arch}.block_count`, ...)."""
    meta = gguf.metadata
    arch = meta["general.architecture"]

    def need(key: str) -> Any:
        if f"{arch}.{key}" not in meta:
            raise KeyError(f"the metadata lacks {arch}.{key}")
        return meta[f"{arch}.{key}"]

    hidden, heads = int(need("embedding_length")), int(need("attention.head_count"))
    vocab = len(meta["tokenizer.ggml.tokens"]) if "tokenizer.ggml.tokens" in meta else int(need("vocab_size"))
    return DecoderConfig(
        architecture=arch,
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=int(need("feed_forward_length")),
        num_layers=int(need("block_count")),
        num_heads=heads,
        num_kv_heads=int(meta.get(f"{arch}.attention.head_count_kv", heads)),
        head_dim=int(meta.get(f"{arch}.attention.key_length", hidden // heads)),
        rms_norm_eps=float(need("attention.layer_norm_rms_epsilon")),
        rope=rope_from_gguf(gguf, arch),
        tie_word_embeddings="output.weight" not in gguf.tensors,
        qkv_bias=arch == "qwen2",
        qk_norm=arch == "qwen3",
    )


def _unpermute_rows(weight: np.ndarray, heads: int) -> np.ndarray:
    """Undo llama.cpp's rotary permutation: per head it stores the even rotary rows, then the odd ones."""
    rows = weight.shape[0]
    return weight.reshape(heads, rows // heads // 2, 2, *weight.shape[1:]).swapaxes(1, 2).reshape(weight.shape)


def state_dict_from_gguf(gguf: GGUFFile, config: DecoderConfig) -> dict[str, torch.Tensor]:
    """Every tensor dequantized to float32 under its Hugging Face name; llama's q and k un-permuted."""
    state: dict[str, torch.Tensor] = {}
    # llama.cpp permuted LLaMA's q and k rows per head (query heads for q, key-value heads for k)
    permuted = {"attn_q.weight": config.num_heads, "attn_q.bias": config.num_heads,
                "attn_k.weight": config.num_kv_heads, "attn_k.bias": config.num_kv_heads}
    for name, info in gguf.tensors.items():
        _, layer, rest = name.split(".", 2) if name.startswith("blk.") and name.count(".") >= 2 else ("", "", "")
        if name in GLOBAL_NAMES:
            target = GLOBAL_NAMES[name]
        elif rest in LAYER_NAMES:
            target = f"model.layers.{layer}.{LAYER_NAMES[rest]}"
        else:
            target = name  # kept under its own name: `decoder_from_state_dict` reports what it does not use
        raw = gguf.raw(name)
        if info.qtype in (GGMLQuantizationType.F32, GGMLQuantizationType.F16):
            values = np.asarray(raw, dtype=np.float32)
        else:
            values = dequantize(raw, info.qtype)
        values = values.reshape(info.shape)
        if config.architecture == "llama" and rest in permuted:
            values = _unpermute_rows(values, permuted[rest])
        state[target] = torch.from_numpy(np.array(values, dtype=np.float32))  # a copy: the file map is read-only
    return state


def stop_token_ids(gguf: GGUFFile) -> list[int]:
    """The end-of-sequence id llama.cpp stops at, as transformers' GGUF config gives it."""
    eos = gguf.metadata.get("tokenizer.ggml.eos_token_id")
    return [int(eos)] if eos is not None else []

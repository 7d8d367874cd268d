"""The decoder's hyper-parameters, shared by the exporter (writes them) and the runtime (reads them).

Lives in the runtime package because the runtime must not import torch, while the PyTorch side
(`mtpedge.models`) is free to import the runtime.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

SUPPORTED_ARCHITECTURES = ("llama", "qwen2", "qwen3")
SUPPORTED_ROPE_TYPES = ("default", "linear", "llama3")


@dataclass(frozen=True)
class RopeConfig:
    """Rotary embedding parameters, carried explicitly (transformers versions disagree on defaults)."""

    theta: float = 10000.0
    rope_type: str = "default"  # default | linear | llama3
    factor: float = 1.0
    low_freq_factor: float = 1.0  # llama3 only
    high_freq_factor: float = 4.0  # llama3 only
    original_max_position: int = 8192  # llama3 only

    def __post_init__(self) -> None:
        if self.rope_type not in SUPPORTED_ROPE_TYPES:
            raise ValueError(
                f"rope type {self.rope_type!r} is not supported (supported: {', '.join(SUPPORTED_ROPE_TYPES)})"
            )


@dataclass(frozen=True)
class DecoderConfig:
    """A LLaMA-family decoder: LLaMA, Qwen2 (q/k/v biases) and Qwen3 (q/k RMSNorm)."""

    architecture: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float = 1e-6
    rope: RopeConfig = field(default_factory=RopeConfig)
    tie_word_embeddings: bool = False
    qkv_bias: bool = False
    qk_norm: bool = False

    def __post_init__(self) -> None:
        if self.architecture not in SUPPORTED_ARCHITECTURES:
            raise ValueError(
                f"architecture {self.architecture!r} is not supported "
                f"(supported: {', '.join(SUPPORTED_ARCHITECTURES)})"
            )
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"num_heads {self.num_heads} is not a multiple of num_kv_heads {self.num_kv_heads}")
        if self.head_dim % 2:
            raise ValueError(f"head_dim {self.head_dim} must be even for rotary embeddings")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DecoderConfig:
        fields = {f.name for f in dataclasses.fields(cls)}
        unknown = set(data) - fields
        if unknown:
            raise ValueError(f"unknown decoder config fields: {sorted(unknown)}")
        values = dict(data)
        values["rope"] = RopeConfig(**values.get("rope", {}))
        return cls(**values)

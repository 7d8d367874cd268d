"""Export parity: one graph call against the PyTorch reference on the same random inputs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort
import torch

from mtpedge.runtime.contract import DEFAULT_MASK_VALUE, GraphShape
from mtpedge.runtime.rope import inverse_frequencies, rope_tables

from ..models.decoder import Decoder


def random_contract_inputs(decoder: Decoder, shape: GraphShape, n_past: int, seed: int = 0) -> dict[str, np.ndarray]:
    """Inputs of one plausible call: real embedding rows, n_past random cached positions, causal block."""
    rng = np.random.default_rng(seed)
    n, c = shape.width, shape.context
    table = decoder.model.embed_tokens.weight.detach().numpy()
    embeds = table[rng.integers(0, shape.vocab_size, n)][None].astype(np.float32)
    bias = np.full((1, 1, n, c + n), DEFAULT_MASK_VALUE, dtype=np.float32)
    bias[0, 0, :, :n_past] = 0
    bias[0, 0, :, c:][np.tril(np.ones((n, n), dtype=bool))] = 0
    inv_freq = inverse_frequencies(decoder.cfg.rope, decoder.cfg.head_dim)
    cos, sin = rope_tables(np.arange(n_past, n_past + n), inv_freq)
    feeds = {"inputs_embeds": embeds, "attention_bias": bias, "rope_cos": cos, "rope_sin": sin}
    for name, dims in shape.input_shapes().items():
        if name.startswith("past_"):
            past = np.zeros(dims, dtype=np.float32)
            past[:, :, :n_past] = rng.standard_normal((*dims[:2], n_past, dims[3])).astype(np.float32)
            feeds[name] = past
    return feeds


def graph_parity(decoder: Decoder, onnx_path: Path, shape: GraphShape, n_past: int | None = None) -> float:
    """Max |logits_onnx - logits_torch| for one call with n_past cached positions (default: a few)."""
    n_past = min(shape.context // 4, 37) if n_past is None else n_past
    feeds = random_contract_inputs(decoder, shape, n_past)
    session = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    onnx_logits = session.run(["logits"], feeds)[0]
    with torch.no_grad():
        torch_logits = decoder(*(torch.from_numpy(feeds[name]) for name in shape.input_shapes()))[0].numpy()
    return float(np.abs(onnx_logits - torch_logits).max())

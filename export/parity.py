"""Export parity: a graph call against the PyTorch reference on a realistic call.

The reference runs a whole token sequence in one causal pass with an empty cache; the graph runs only the
last N tokens, with the first tokens' K/V (from the same reference pass) as its cache. Equal logits show
the graph, the cache layout, the positions and the bias all agree with the reference.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort
import torch

from mtpedge.runtime.attention_bias import block_inputs
from mtpedge.runtime.contract import CACHE_SLOTS, DEFAULT_MASK_VALUE, LORA_GATE, GraphShape
from mtpedge.runtime.rope import inverse_frequencies, rope_tables

from ..models.decoder import Decoder


def reference_call(decoder: Decoder, tokens: np.ndarray, context: int) -> tuple[np.ndarray, list[np.ndarray]]:
    """Logits (T, V) and per-layer K/V (1, Hkv, T, D) of `tokens` in one causal pass from position 0."""
    t = tokens.shape[0]
    cfg = decoder.cfg
    embeds = decoder.model.embed_tokens.weight.detach()[torch.from_numpy(tokens)][None]
    bias = np.full((1, 1, t, context + t), DEFAULT_MASK_VALUE, dtype=np.float32)
    bias[0, 0, :, context:][np.tril(np.ones((t, t), dtype=bool))] = 0
    cos, sin = rope_tables(np.arange(t), inverse_frequencies(cfg.rope, cfg.head_dim))
    past = [torch.zeros(1, cfg.num_kv_heads, context, cfg.head_dim)] * (2 * cfg.num_layers)
    with torch.no_grad():
        logits, *kv = decoder(embeds, torch.from_numpy(bias), torch.from_numpy(cos), torch.from_numpy(sin), None, *past)
    return logits[0].numpy(), [x.numpy() for x in kv]


def parity_feeds(decoder: Decoder, shape: GraphShape, n_past: int, seed: int = 0):
    """Graph inputs for the last `shape.width` of n_past + width random tokens, and the reference logits."""
    rng = np.random.default_rng(seed)
    n, c = shape.width, shape.context
    tokens = rng.integers(0, shape.vocab_size, n_past + n)
    ref_logits, ref_kv = reference_call(decoder, tokens, c)
    table = decoder.model.embed_tokens.weight.detach().numpy()
    bias, slots = block_inputs(n_past, np.tril(np.ones((n, n), dtype=bool)), n, c, DEFAULT_MASK_VALUE)
    cos, sin = rope_tables(np.arange(n_past, n_past + n),
                           inverse_frequencies(decoder.cfg.rope, decoder.cfg.head_dim))
    feeds = {"inputs_embeds": table[tokens[n_past:]][None].astype(np.float32), "attention_bias": bias,
             "rope_cos": cos, "rope_sin": sin, CACHE_SLOTS: slots}
    if LORA_GATE in shape.input_shapes():  # an adapter graph with gate 0 must be the base model
        feeds[LORA_GATE] = np.zeros((1, n), dtype=np.float32)
    past_names = [name for name in shape.input_shapes() if name.startswith("past_")]
    for name, kv in zip(past_names, ref_kv, strict=True):
        past = np.zeros((1, kv.shape[1], c, kv.shape[3]), dtype=np.float32)
        past[:, :, :n_past] = kv[:, :, :n_past]
        feeds[name] = past
    return feeds, ref_logits[n_past:]


def graph_parity(decoder: Decoder, onnx_path: Path, shape: GraphShape, n_past: int | None = None) -> dict:
    """Max abs and relative logit difference of one graph call vs the reference, and argmax agreement."""
    n_past = min(shape.context - shape.width, 23) if n_past is None else n_past
    feeds, ref = parity_feeds(decoder, shape, n_past)
    session = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    logits = session.run(["logits"], feeds)[0][0]
    diff = float(np.abs(logits - ref).max())
    return {"max_abs": diff, "max_rel": diff / float(np.abs(ref).max()),
            "argmax_agree": float((logits.argmax(-1) == ref.argmax(-1)).mean())}

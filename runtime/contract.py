"""The graph contract: names, shapes and meaning of every exported decoder graph's inputs and outputs.

One static graph per width N (input slots per call); every graph of a bundle shares the context C:

    inputs_embeds     (1, N, hidden)            float32   the host looks up embeddings: a mask slot is a vector
    attention_bias    (1, 1, N, C)              float32   additive over cache columns; 0 = visible, MASK_VALUE = hidden
    rope_cos/rope_sin (1, 1, N, head_dim/2)     float32   host-side RoPE at each slot's position
    cache_slots       (1, N)                    int64     the cache column each row's new K/V takes (see below)
    past_key_{l}      (1, kv_heads, C, head_dim) float32  the host cache, passed whole (read only)
    past_value_{l}    (1, kv_heads, C, head_dim) float32
  ->
    logits            (1, N, vocab)             float32
    new_key_{l}       (1, kv_heads, N, head_dim) float32  only the N new entries; the host commits them
    new_value_{l}     (1, kv_heads, N, head_dim) float32

Optional adapter I/O (bundles exported with a multi-token adapter, `mtpedge export --mtp-adapter`; the
manifest's extras["mtp"]["adapter_graphs"] says so):

    lora_gate         (1, N)                    float32   1 = this slot is a mask slot (gated LoRA on), 0 = a
                                                          token slot: exactly the base model; the host feeds 0
                                                          unless a drafter asks for its SLOT nodes
  ->
    hidden_states     (1, N, hidden)            float32   final-normed hidden rows (the sampler head's input)

Optional tapped hidden state (DMTD bundles, export/dmtd_bundle.py; the manifest's extras["layer_hidden"] = T):
  ->
    layer_hidden      (1, N, hidden)            float32   the residual stream entering layer T (DMTD: what the
                                                          thinking layers hand the decoding layers)

Headless graphs (DMTD's trained thinking layers, export/dmtd_bundle.py) have no LM head: no `logits`, and
`layer_hidden` with T = the graph's own layer count, i.e. the residual stream its last layer outputs.

How a block attends: the graph writes row i's new K/V into its own copy of the past at column cache_slots[i]
and every row attends over those C columns. The host gives a block of n slots at n_past the columns
n_past .. n_past + n - 1 (by node index) and every padding row the first free column n_past + n; the bias
opens, for each row, the committed columns [0, n_past) and the columns of the nodes it sees. Why not append the
block's keys after the cache (C + N columns, contract version 1): a chain's row then sums its attention in
another order than plain decoding's later call, which finds the same keys inside the cache. With the keys at
the columns plain decoding will read them from, a chain (lookup's drafts, a prefill chunk) computes every row
bit for bit as plain decoding does (tests/test_lossless_rows.py); the copy costs ~0.01 ms a layer at C = 256
(benchmarks/results/fast/README.md section 12).

Why the past is the whole cache (C positions) rather than a filled prefix: the host cache is one contiguous
(1, kv_heads, C, head_dim) buffer per layer, and a full-buffer input is passed to onnxruntime without a
copy; a prefix of it would be a strided view that must be copied on every call.
"""

from __future__ import annotations

from dataclasses import dataclass

# Finite, so that it survives 16-bit quantization of the mask; float32 graphs use a large value.
DEFAULT_MASK_VALUE = -1e9
LORA_GATE = "lora_gate"
HIDDEN_STATES = "hidden_states"
LAYER_HIDDEN = "layer_hidden"  # the output, and the manifest extras key holding its layer T
# manifest extras key: the graphs use onnxruntime's fused CPU contrib ops (export/fused_ops.py), {op: count}
FUSED_OPS = "fused_ops"
CACHE_SLOTS = "cache_slots"


def past_key_name(layer: int) -> str:
    return f"past_key_{layer}"


def past_value_name(layer: int) -> str:
    return f"past_value_{layer}"


def new_key_name(layer: int) -> str:
    return f"new_key_{layer}"


def new_value_name(layer: int) -> str:
    return f"new_value_{layer}"


def graph_name(kind: str, width: int, context: int) -> str:
    return f"{kind}_ar{width}_cl{context}"


@dataclass(frozen=True)
class GraphShape:
    """What fixes every shape of one graph."""

    width: int  # N: input slots per call
    context: int  # C: cache positions
    hidden_size: int
    head_dim: int
    num_kv_heads: int
    num_layers: int
    vocab_size: int
    adapter: bool = False  # the optional lora_gate input and hidden_states output
    tap_layer: int = 0  # > 0: the optional layer_hidden output, the residual stream entering this layer
    head: bool = True  # False: no LM head and no logits output (a headless graph: tap_layer = num_layers)

    def input_shapes(self) -> dict[str, list[int]]:
        n, c = self.width, self.context
        shapes = {
            "inputs_embeds": [1, n, self.hidden_size],
            "attention_bias": [1, 1, n, c],
            "rope_cos": [1, 1, n, self.head_dim // 2],
            "rope_sin": [1, 1, n, self.head_dim // 2],
            CACHE_SLOTS: [1, n],
        }
        if self.adapter:
            shapes[LORA_GATE] = [1, n]
        for layer in range(self.num_layers):
            shapes[past_key_name(layer)] = [1, self.num_kv_heads, c, self.head_dim]
            shapes[past_value_name(layer)] = [1, self.num_kv_heads, c, self.head_dim]
        return shapes

    def output_shapes(self) -> dict[str, list[int]]:
        shapes = {"logits": [1, self.width, self.vocab_size]} if self.head else {}
        if self.adapter:
            shapes[HIDDEN_STATES] = [1, self.width, self.hidden_size]
        if self.tap_layer:
            shapes[LAYER_HIDDEN] = [1, self.width, self.hidden_size]
        for layer in range(self.num_layers):
            shapes[new_key_name(layer)] = [1, self.num_kv_heads, self.width, self.head_dim]
            shapes[new_value_name(layer)] = [1, self.num_kv_heads, self.width, self.head_dim]
        return shapes

"""The training layout of the multi-token adapter: k mask slots after every response token.

Attention rule (methods.md 2.2): token queries see earlier token keys only (plain causal); a mask query sees
token keys up to and including its block's owner x_t, plus the earlier masks of its own block. Mask j
(0-based) of the block after x_t sits at position t + 1 + j and is trained to predict x_{t+2+j}: the token
j + 1 places after the one the owner's own logits predict (what ESP asks of its mask slot j).

Because token slots never see masks and their gate is 0, the token half of the layout is exactly the
frozen base model: it runs once without gradients and becomes the mask half's KV "cache". The mask half is
one block call with a bias of shape (1, 1, N, T + N), N = blocks * k, the same contract as a graph call.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

IGNORE = -100  # CE target of a mask whose target lies past the sequence end


@dataclass(frozen=True)
class MaskBlockLayout:
    owners: np.ndarray  # (B,) sequence index t of each block's owner token
    positions: np.ndarray  # (N,) RoPE position of each mask slot, N = B * k
    bias: np.ndarray  # (1, 1, N, T + N) float32 additive attention bias
    targets: np.ndarray  # (N,) token id each mask slot predicts, IGNORE past the end
    prev_tokens: np.ndarray  # (N,) the token before each target (the sampler head's "previous token")
    ntp_rows: np.ndarray  # (N,) sequence index whose token-slot latent predicts the same target (LCM), -1 if none


def block_owners(prompt_len: int, total_len: int, max_blocks: int | None, rng: np.random.Generator) -> np.ndarray:
    """Owner indices: the last prompt token and every response token that has a token 2 ahead to predict.

    max_blocks keeps a random subset (sorted), which bounds the cost of one training step.
    """
    owners = np.arange(prompt_len - 1, total_len - 2)
    if max_blocks is not None and owners.size > max_blocks:
        owners = np.sort(rng.choice(owners, size=max_blocks, replace=False))
    return owners


def mask_block_layout(tokens: np.ndarray, owners: np.ndarray, k: int, mask_value: float = -1e9) -> MaskBlockLayout:
    tokens = np.asarray(tokens, dtype=np.int64)
    t_len, b = tokens.shape[0], owners.shape[0]
    n = b * k
    owner_of_slot = np.repeat(owners, k)
    j = np.tile(np.arange(k), b)
    positions = owner_of_slot + 1 + j
    target_index = owner_of_slot + 2 + j
    valid = target_index < t_len
    targets = np.where(valid, tokens[np.minimum(target_index, t_len - 1)], IGNORE)
    prev_tokens = tokens[np.minimum(target_index - 1, t_len - 1)]
    ntp_rows = np.where(valid, target_index - 1, -1)
    bias = np.full((1, 1, n, t_len + n), mask_value, dtype=np.float32)
    bias[0, 0, :, :t_len][np.arange(t_len)[None, :] <= owner_of_slot[:, None]] = 0.0
    block = np.repeat(np.arange(b), k)
    same_block_earlier = (block[:, None] == block[None, :]) & (j[None, :] <= j[:, None])
    bias[0, 0, :, t_len:][same_block_earlier] = 0.0
    return MaskBlockLayout(owners, positions, bias, targets.astype(np.int64), prev_tokens.astype(np.int64),
                           ntp_rows.astype(np.int64))


def causal_bias(t_len: int, mask_value: float = -1e9) -> np.ndarray:
    """(1, 1, T, 0 + T): plain causal attention over the token sequence with an empty cache."""
    bias = np.full((1, 1, t_len, t_len), mask_value, dtype=np.float32)
    bias[0, 0][np.tril(np.ones((t_len, t_len), dtype=bool))] = 0.0
    return bias

"""The multi-token adapter's host side: learned mask embeddings and the sampler head, in numpy.

The sampler head (models/mtp_adapter.py) runs sequentially over the k masks of one owner: draft j comes from
[embedding of draft j-1 (the root for j = 1); hidden state of mask j], in the form the adapter was trained in
(extras["mtp"]["sampler_form"]):

    residual  h' = h + W2 rmsnorm(silu(W1 [e_prev; h] + b1)) + b2
    paper     h' = rmsnorm2(silu(W2 rmsnorm(silu(W1 [e_prev; h] + b1)) + b2))
    logits = U h'

Scoring all of U (vocab x hidden, 113 MB for SmolLM2) per mask is a memory-bound matrix-vector product;
`candidates` > 0 scores only the top rows of the mask's plain logits (which the graph already computed),
a shortlist that nearly always contains the sampler's choice. Drafts are proposals only (the verifier
decides), so the shortlist changes speed, never the output.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..bundle import BundleError

if TYPE_CHECKING:
    from ..engine import Engine


def mtp_extras(engine: Engine) -> dict:
    extras = engine.manifest.extras.get("mtp")
    if not extras:
        raise BundleError(f"bundle {engine.folder} has no multi-token adapter: for the default model, export the "
                          "shipped one (`mtpedge export --mtp-adapter default`, or `generate --drafter mtp` without "
                          "--bundle); for another, train one with `mtpedge train-mtp` and export it with "
                          "`mtpedge export MODEL --mtp-adapter ADAPTER.pt`")
    return extras


def _load(engine: Engine, name: str) -> np.ndarray:
    path = engine.folder / name
    if not path.is_file():
        raise BundleError(f"bundle {engine.folder} lacks {name} named by its manifest: re-run `mtpedge export "
                          "--mtp-adapter ...`")
    return np.load(path)


def learned_masks(engine: Engine) -> np.ndarray:
    """The adapter's k learned mask embeddings (k, hidden) float32."""
    masks = _load(engine, mtp_extras(engine)["masks_file"]).astype(np.float32)
    if masks.ndim != 2 or masks.shape[1] != engine.config.hidden_size:
        raise BundleError(f"learned masks of shape {masks.shape} do not fit hidden size {engine.config.hidden_size}")
    return masks


def _silu(u: np.ndarray) -> np.ndarray:
    return u / (1.0 + np.exp(-u))


def _rms_norm(x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * weight


class SamplerHead:
    """The trained sampler head of a bundle; `draft(root, mask_hidden, mask_logits)` -> k draft tokens."""

    def __init__(self, engine: Engine, candidates: int = 64) -> None:
        extras = mtp_extras(engine)
        if not extras.get("sampler"):
            raise BundleError(f"the adapter of {engine.folder} has no sampler head (trained with --no-sampler)")
        self.form = extras.get("sampler_form", "residual")
        if self.form not in ("residual", "paper"):
            raise BundleError(f"the sampler head of {engine.folder} has the form {self.form!r}, which this runtime "
                              "does not know: update mtpedge or re-export with this version")
        with _load(engine, extras["sampler_file"]) as z:
            needed = ["fc1_weight", "fc1_bias", "norm_weight", "fc2_weight", "fc2_bias", "eps"]
            missing = [name for name in needed + ["norm2_weight"] * (self.form == "paper") if name not in z]
            if missing:
                raise BundleError(f"{extras['sampler_file']} in {engine.folder} lacks {', '.join(missing)} for a "
                                  f"{self.form}-form head: re-run `mtpedge export --mtp-adapter ...`")
            self.w1, self.b1 = z["fc1_weight"], z["fc1_bias"]
            self.norm, self.eps = z["norm_weight"], float(z["eps"])
            self.w2, self.b2 = z["fc2_weight"], z["fc2_bias"]
            self.norm2 = z["norm2_weight"] if self.form == "paper" else None
        unembedding = extras.get("unembedding", "embeddings")
        self.unembed = engine.embeddings if unembedding == "embeddings" else np.load(
            engine.folder / unembedding, mmap_mode="r")
        self.table = engine.embeddings
        self.candidates = candidates

    def hidden(self, prev_token: int, mask_hidden: np.ndarray) -> np.ndarray:
        return self.hidden_after(np.array([prev_token]), mask_hidden)[0]

    def hidden_after(self, prev_tokens: np.ndarray, mask_hidden: np.ndarray) -> np.ndarray:
        """The head's hidden state (m, hidden) after each of `prev_tokens` (m,) for one mask's hidden state."""
        x = np.concatenate([np.asarray(self.table[prev_tokens], dtype=np.float32),
                            np.broadcast_to(mask_hidden, (prev_tokens.shape[0], mask_hidden.shape[0]))], axis=1)
        u = _rms_norm(_silu(x @ self.w1.T + self.b1), self.norm, self.eps)
        if self.norm2 is not None:  # the paper's second block: no skip path
            return _rms_norm(_silu(u @ self.w2.T + self.b2), self.norm2, self.eps)
        return mask_hidden + u @ self.w2.T + self.b2

    def shortlist(self, plain_logits: np.ndarray) -> np.ndarray | None:
        """Ids of the top `candidates` plain logits, ascending (None: score the whole vocabulary)."""
        if not self.candidates or self.candidates >= plain_logits.shape[0]:
            return None
        return np.sort(np.argpartition(-plain_logits, self.candidates)[: self.candidates])

    def best_token(self, h: np.ndarray, plain_logits: np.ndarray | None) -> int:
        rows = None if plain_logits is None else self.shortlist(plain_logits)
        if rows is None:
            return int(np.argmax(np.asarray(self.unembed, dtype=np.float32) @ h))
        return int(rows[int(np.argmax(np.asarray(self.unembed[rows], dtype=np.float32) @ h))])

    def top_next_tokens(self, prev_tokens: np.ndarray, mask_hidden: np.ndarray, plain_logits: np.ndarray, count: int
                        ) -> tuple[np.ndarray, np.ndarray]:
        """The `count` best next tokens after each of `prev_tokens` (m,) for one mask, with the sampler's
        probabilities over the shortlist (top `self.candidates` of `plain_logits`, or all of the vocabulary).

        Returns (tokens (m, count), probabilities (m, count)), best first, ties by lower token id.
        """
        rows = self.shortlist(plain_logits)
        rows = np.arange(plain_logits.shape[0]) if rows is None else rows
        h = self.hidden_after(prev_tokens, mask_hidden)
        scores = h @ np.asarray(self.unembed[rows], dtype=np.float32).T  # (m, shortlist)
        scores = scores.astype(np.float64) - scores.max(axis=1, keepdims=True)
        probs = np.exp(scores)
        probs /= probs.sum(axis=1, keepdims=True)
        count = min(count, rows.shape[0])
        order = np.lexsort((np.broadcast_to(rows, probs.shape), -probs), axis=1)[:, :count]
        return rows[order], np.take_along_axis(probs, order, axis=1)

    def draft(self, root: int, mask_hidden: np.ndarray, mask_logits: np.ndarray | None) -> list[int]:
        """k drafts after `root`, each conditioned on the one before (teacher forcing at training time)."""
        drafts, prev = [], root
        for j in range(mask_hidden.shape[0]):
            h = self.hidden(prev, mask_hidden[j])
            prev = self.best_token(h, None if mask_logits is None else mask_logits[j])
            drafts.append(prev)
        return drafts

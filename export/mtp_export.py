"""A bundle with a multi-token adapter: what `export_bundle` does differently when given one.

    graphs            with LoRA or a sampler: the adapter graph (extra input `lora_gate`, extra output
                      `hidden_states`, runtime/contract.py); masks alone: the plain base graphs
    mtp_masks.npy     (k, hidden) float32 learned mask embeddings
    mtp_sampler.npz   the sampler head for the host (numpy) side: fc1, norm, fc2 (and norm2 in the paper's
                      form, extras["mtp"]["sampler_form"])
    mtp_unembed.npy   the output matrix for the sampler head, only if it differs from embeddings.npy
                      (tied models such as SmolLM2 reuse the embedding table)
    extras["mtp"]     k, rank, sampler, adapter_graphs, file names, training provenance

The adapter must have been trained on the same base weights (the checkpoint records their sha256).
"""

from __future__ import annotations

import copy
import hashlib
import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

from ..models.checkpoint import shipped_or_path
from ..models.loading import LoadedModel
from ..models.mtp_adapter import AdapterGraphModule, MtpAdapter
from ..models.mtp_training import adapter_from_checkpoint, load_checkpoint
from .shipped import DEFAULT_ADAPTER

log = logging.getLogger(__name__)

MASKS_FILE = "mtp_masks.npy"
SAMPLER_FILE = "mtp_sampler.npz"
UNEMBED_FILE = "mtp_unembed.npy"


def resolve_adapter(name: str) -> Path:
    """`default` names the shipped adapter; anything else is a checkpoint path."""
    return shipped_or_path(name, DEFAULT_ADAPTER, "adapter",
                           "train one with `mtpedge train-mtp` and pass its path to --mtp-adapter")


@dataclass
class MtpExport:
    adapter: MtpAdapter
    payload: dict
    checkpoint_sha256: str = ""  # of the checkpoint file: a cached -mtp bundle of another adapter is re-exported

    @classmethod
    def load(cls, checkpoint: str | Path, loaded: LoadedModel) -> MtpExport:
        checkpoint = resolve_adapter(str(checkpoint))
        payload = load_checkpoint(checkpoint)
        trained_on = payload.get("base", {}).get("source_sha256")
        if trained_on and trained_on != loaded.source_sha256:
            raise ValueError(f"the adapter {checkpoint} was trained on other base weights (sha256 {trained_on[:12]}, "
                             f"this model {loaded.source_sha256[:12]}): train it for this model with `mtpedge "
                             "train-mtp --model ...`")
        # a copy: attaching the gated LoRA swaps modules in place, and the caller's decoder stays the base
        adapter = adapter_from_checkpoint(copy.deepcopy(loaded.decoder), payload)
        adapter.eval()
        return cls(adapter, payload, hashlib.sha256(checkpoint.read_bytes()).hexdigest())

    @property
    def adapter_graphs(self) -> bool:
        return bool(self.adapter.config.rank) or self.adapter.sampler is not None

    def graph_module(self, decoder: nn.Module) -> nn.Module:
        return AdapterGraphModule(self.adapter) if self.adapter_graphs else decoder

    def write_files(self, folder: Path) -> dict:
        """Write the adapter's data files into the bundle folder; returns extras["mtp"]."""
        a = self.adapter
        np.save(folder / MASKS_FILE, a.masks.detach().numpy().astype(np.float32))
        extras = {"k": a.config.k, "rank": a.config.rank, "alpha": a.config.alpha, "sampler": a.sampler is not None,
                  "adapter_graphs": self.adapter_graphs, "masks_file": MASKS_FILE,
                  "checkpoint_sha256": self.checkpoint_sha256,
                  "training": {"steps": self.payload["step"], "train_config": self.payload["train_config"],
                               "data": self.payload.get("data", {})}}
        if a.sampler is not None:
            np.savez(folder / SAMPLER_FILE, **sampler_arrays(a))
            extras["sampler_file"] = SAMPLER_FILE
            extras["sampler_form"] = a.config.sampler_form
            unembed, table = a.decoder.lm_head.weight.detach(), a.decoder.model.embed_tokens.weight.detach()
            if torch.equal(unembed, table):
                extras["unembedding"] = "embeddings"
            else:
                np.save(folder / UNEMBED_FILE, unembed.numpy().astype(np.float32))
                extras["unembedding"] = UNEMBED_FILE
        log.info("adapter: k=%d rank=%d sampler=%s (%d steps)", a.config.k, a.config.rank, a.sampler is not None,
                 self.payload["step"])
        return extras


def sampler_arrays(adapter: MtpAdapter) -> dict[str, np.ndarray]:
    """The sampler head's weights as the host side reads them (runtime/drafters/mtp_head.py), float32."""
    s = adapter.sampler
    norm = s.norm if adapter.config.sampler_form == "residual" else s.norm1
    arrays = {"fc1_weight": s.fc1.weight, "fc1_bias": s.fc1.bias, "norm_weight": norm.weight,
              "fc2_weight": s.fc2.weight, "fc2_bias": s.fc2.bias}
    if adapter.config.sampler_form == "paper":
        arrays["norm2_weight"] = s.norm2.weight
    return {"eps": np.float32(norm.eps), **{k: v.detach().numpy().astype(np.float32) for k, v in arrays.items()}}

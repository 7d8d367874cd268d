"""transformers `generate` on the same model in float32: greedy, and with prompt-lookup decoding."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

from ..methods import MethodRun
from . import PeerConfig


def load_hf_model(model: Path):
    """A float32 transformers model from a GGUF file (dequantized, as mtpedge's export does) or a folder."""
    import torch
    from transformers import AutoModelForCausalLM

    if model.suffix == ".gguf":
        hf = AutoModelForCausalLM.from_pretrained(str(model.parent), gguf_file=model.name, dtype=torch.float32)
    else:
        hf = AutoModelForCausalLM.from_pretrained(str(model), dtype=torch.float32)
    return hf.eval()


class _FirstTokenClock:
    """A generate() streamer that notes when the first new token arrives (its first put() is the prompt)."""

    def __init__(self) -> None:
        self.puts = 0
        self.first_at: float | None = None

    def put(self, value) -> None:
        self.puts += 1
        if self.puts == 2:
            self.first_at = time.perf_counter()

    def end(self) -> None:
        pass


class TransformersPeer:
    kind = "peer"

    def __init__(self, name: str, config: PeerConfig) -> None:
        import torch

        torch.set_num_threads(config.threads)
        self.name = name
        self.torch = torch
        self.model = load_hf_model(config.model)
        self.lookup = config.lookup_tokens if name.endswith("-lookup") else None
        self.eos = list(config.eos_token_ids)

    def generate(self, prompt_ids: Sequence[int], max_new_tokens: int) -> MethodRun:
        torch = self.torch
        ids = torch.tensor([list(prompt_ids)], dtype=torch.long)
        clock = _FirstTokenClock()
        options = {"prompt_lookup_num_tokens": self.lookup} if self.lookup else {}
        started = time.perf_counter()
        with torch.inference_mode():
            out = self.model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new_tokens,
                                      do_sample=False, eos_token_id=self.eos, pad_token_id=self.eos[0],
                                      streamer=clock, **options)
        elapsed = time.perf_counter() - started
        new = [int(t) for t in out[0, ids.shape[1]:]]
        for i, token in enumerate(new):  # the stop token is not part of the answer, as in mtpedge
            if token in self.eos:
                new = new[:i]
                break
        first = (clock.first_at - started) if clock.first_at else elapsed
        return MethodRun(new, first, elapsed)

    def close(self) -> None:
        del self.model


def make(name: str, config: PeerConfig) -> TransformersPeer:
    return TransformersPeer(name, config)

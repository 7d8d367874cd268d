"""DMTD part graphs at run time: one onnxruntime session per (role, width), each role with its own KV cache.

A DMTD bundle (export/dmtd_bundle.py) lists its parts under `extras["dmtd"]`. The roles' caches fill at
different paces in the lossy mode (tokens between cycle heads skip the thinking layers and are refilled at
the next head), so each part keeps its own `n_past`; positions are absolute, so a part's cache is always a
contiguous prefix of the sequence.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnxruntime as ort

from .attention_bias import naive_attention_bias
from .bundle import BundleError
from .contract import new_key_name, new_value_name
from .engine import Engine
from .kv_cache import KVCache
from .rope import rope_tables

ROLES = ("thinking", "base_decoding", "dmtd_decoding")


@dataclass
class PartOutput:
    values: np.ndarray  # (n, hidden) for thinking, (n, vocab) logits for decoding parts
    new_keys: list[np.ndarray]
    new_values: list[np.ndarray]


class Part:
    """All widths of one role, and the KV cache of that role's layers."""

    def __init__(self, folder: Path, role: str, entries: list[dict], engine: Engine, threads: int | None) -> None:
        self.role = role
        self.entries = sorted(entries, key=lambda e: e["width"])
        self.layers = int(self.entries[0]["layers"])
        cfg = engine.config
        self.context, self.mask_value = engine.context, engine.mask_value
        self.cache = KVCache(self.layers, cfg.num_kv_heads, self.context, cfg.head_dim)
        self.input_name = "inputs_embeds" if role == "thinking" else "hidden_in"
        self.output_name = "hidden" if role == "thinking" else "logits"
        opts = ort.SessionOptions()
        if threads:
            opts.intra_op_num_threads, opts.inter_op_num_threads = threads, 1
        self.sessions: dict[int, ort.InferenceSession] = {}
        for entry in self.entries:
            path = folder / entry["file"]
            if not path.is_file():
                raise BundleError(f"{path} is missing: the DMTD bundle is incomplete; re-run "
                                  "`mtpedge train-dmtd --steps 0 --export-bundle ...`")
            self.sessions[int(entry["width"])] = ort.InferenceSession(str(path), opts,
                                                                      providers=["CPUExecutionProvider"])
        cos, sin = rope_tables(np.arange(self.context + self.max_width), engine.inv_freq)
        self._cos, self._sin = cos, sin
        self.calls, self.seconds = 0, 0.0

    @property
    def max_width(self) -> int:
        return int(self.entries[-1]["width"])

    def width_for(self, n: int) -> int:
        for width in self.sessions:
            if width >= n:
                return width
        raise BundleError(f"a block of {n} slots fits no {self.role} graph (widths {list(self.sessions)}): "
                          "use fewer draft tokens / a smaller τ, or re-export with wider --draft-widths")

    def run(self, x: np.ndarray) -> PartOutput:
        """A causal chain of n rows at positions [n_past, n_past + n); nothing is committed."""
        n = x.shape[0]
        width = self.width_for(n)
        n_past = self.cache.n_past
        if n_past + n > self.context:
            from .kv_cache import ContextOverflowError

            raise ContextOverflowError(f"the sequence outgrows the bundle's context of {self.context}: shorten "
                                       "the prompt or max_new_tokens")
        visible = np.tril(np.ones((n, n), dtype=bool))
        bias = naive_attention_bias(n_past, visible, width, self.context, self.mask_value)
        positions = np.full(width, n_past, dtype=np.int64)
        positions[:n] += np.arange(n)
        padded = np.zeros((1, width, x.shape[1]), dtype=np.float32)
        padded[0, :n] = x
        feeds = {self.input_name: padded, "attention_bias": bias, "rope_cos": self._cos[:, :, positions],
                 "rope_sin": self._sin[:, :, positions], **self.cache.graph_inputs()}
        sess = self.sessions[width]
        started = time.perf_counter()
        outputs = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds), strict=True))
        self.seconds += time.perf_counter() - started
        self.calls += 1
        return PartOutput(outputs[self.output_name][0, :n],
                          [outputs[new_key_name(i)] for i in range(self.layers)],
                          [outputs[new_value_name(i)] for i in range(self.layers)])

    def run_chunked(self, x: np.ndarray, chunk: int) -> np.ndarray:
        """Run and commit a long chain (a prompt) in chunks; returns every row's output."""
        rows = []
        for start in range(0, x.shape[0], chunk):
            out = self.run(x[start: start + chunk])
            self.commit(out, out.values.shape[0])
            rows.append(out.values)
        return np.concatenate(rows)

    def commit(self, out: PartOutput, count: int) -> None:
        """Commit the first `count` rows of a chain call."""
        self.cache.commit_accepted_kv(out.new_keys, out.new_values, np.arange(count))


class DmtdParts:
    """The three parts of a DMTD bundle, sharing the engine's tokenizer and embedding table."""

    def __init__(self, engine: Engine, threads: int | None = None) -> None:
        info = engine.manifest.extras.get("dmtd")
        if not info:
            raise BundleError(f"{engine.folder} is not a DMTD bundle (no DMTD part graphs): make one with "
                              "`mtpedge train-dmtd ... --export-bundle DIR`")
        self.engine = engine
        self.decoding_layers = int(info["decoding_layers"])
        self.trained_taus = tuple(info.get("trained_taus", ()))
        self.parts = {role: Part(engine.folder, role, [p for p in info["parts"] if p["role"] == role], engine,
                                 threads) for role in ROLES}
        self.chunk = max(p["width"] for p in info["parts"])

    @property
    def thinking(self) -> Part:
        return self.parts["thinking"]

    @property
    def base(self) -> Part:
        return self.parts["base_decoding"]

    @property
    def dmtd(self) -> Part:
        return self.parts["dmtd_decoding"]

    def reset(self) -> None:
        for part in self.parts.values():
            part.cache.reset()

    @property
    def graph_seconds(self) -> float:
        return sum(p.seconds for p in self.parts.values())

    @property
    def graph_calls(self) -> int:
        return sum(p.calls for p in self.parts.values())

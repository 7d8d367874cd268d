"""onnxruntime sessions over a bundle's graphs, one per width, and the choice of graph for a block."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnxruntime as ort

from .bundle import BundleError, GraphEntry, Manifest
from .contract import HIDDEN_STATES, LAYER_HIDDEN, new_key_name, new_value_name
from .qnn import DISABLE_CPU_FALLBACK, QNN_EP, add_qnn_provider, check_qnn_bundle

log = logging.getLogger(__name__)


@dataclass
class GraphOutput:
    logits: np.ndarray | None  # (n, vocab): rows of the real slots only (None: a headless graph, see contract)
    new_keys: list[np.ndarray]  # per layer (1, kv_heads, N, head_dim), N = graph width (padding included)
    new_values: list[np.ndarray]
    seconds: float  # time inside session.run
    hidden: np.ndarray | None = None  # (n, hidden) final-normed rows: adapter graphs only (contract HIDDEN_STATES)
    layer_hidden: np.ndarray | None = None  # (n, hidden) the tapped residual stream: DMTD bundles (LAYER_HIDDEN)
    # rows [0, plain_rows) computed bit for bit as plain decoding computes their tokens: the block's leading chain
    # inside the context (Engine.run_block); the decode loop trusts no other row's logits
    plain_rows: int = 1 << 30


class GraphSet:
    """Sessions for every graph of a bundle, created on first use or all at once by `load_all`."""

    def __init__(self, folder: Path, manifest: Manifest, threads: int | None = None,
                 providers: list | None = None, session_options: dict[str, str] | None = None) -> None:
        self.folder = folder
        self.manifest = manifest
        self.entries = sorted(manifest.graphs, key=lambda g: g.width)
        self.threads = threads
        self.providers = providers or ["CPUExecutionProvider"]
        self.session_options = session_options or {}
        check_qnn_bundle(manifest, self.providers)
        self._sessions: dict[str, ort.InferenceSession] = {}
        self.num_layers = manifest.config.num_layers

    @property
    def max_width(self) -> int:
        return self.entries[-1].width

    @property
    def prefill_width(self) -> int:
        """Chunk size for prompts: the widest prefill graph (the widest graph if there is none)."""
        return max((e.width for e in self.entries if e.kind == "prefill"), default=self.max_width)

    def entry_for(self, n: int, kind: str | None = None, context: int | None = None) -> GraphEntry:
        """The narrowest graph with at least n slots (of `kind` if given, else any) for a cache of `context`
        positions (default: the bundle's context)."""
        context = context or self.manifest.context
        candidates = [e for e in self.entries if e.width >= n and (kind is None or e.kind == kind)
                      and e.context == context]
        if not candidates:
            widths = sorted({e.width for e in self.entries})
            raise BundleError(f"a block of {n} slots fits no graph of this bundle (widths {widths}); "
                              "re-export with a wider --decode-widths")
        return candidates[0]

    def load_all(self) -> None:
        for entry in self.entries:
            self.session(entry)

    def session(self, entry: GraphEntry) -> ort.InferenceSession:
        if entry.name not in self._sessions:
            opts = ort.SessionOptions()
            if self.threads:
                opts.intra_op_num_threads = self.threads
                opts.inter_op_num_threads = 1
            for key, value in self.session_options.items():
                opts.add_session_config_entry(key, value)
            providers = self.providers
            if QNN_EP in providers:  # a plugin EP: chosen by device in the options, not by name
                add_qnn_provider(opts, self.manifest, allow_cpu_fallback=self.session_options.get(
                    DISABLE_CPU_FALLBACK) == "0")
                providers = None
            started = time.perf_counter()
            try:
                sess = ort.InferenceSession(str(self.folder / entry.file), opts, providers=providers)
            except Exception as err:  # onnxruntime raises its own exception types
                raise BundleError(f"onnxruntime cannot load {entry.file}: {err}; re-run `mtpedge export`") from err
            self._check_io(entry, sess)
            log.info("loaded %s in %.1f s", entry.name, time.perf_counter() - started)
            self._sessions[entry.name] = sess
        return self._sessions[entry.name]

    @staticmethod
    def _check_io(entry: GraphEntry, sess: ort.InferenceSession) -> None:
        actual_in = {i.name: list(i.shape) for i in sess.get_inputs()}
        actual_out = {o.name: list(o.shape) for o in sess.get_outputs()}
        expected = {**entry.inputs, **entry.outputs}
        actual = {**actual_in, **actual_out}
        wrong = sorted(name for name in expected.keys() | actual.keys() if expected.get(name) != actual.get(name))
        if wrong:
            first = wrong[0]
            raise BundleError(
                f"{entry.file}: {len(wrong)} inputs/outputs differ from the manifest (e.g. {first}: graph "
                f"{actual.get(first)}, manifest {expected.get(first)}); the bundle mixes files of different "
                "exports: re-run `mtpedge export`"
            )

    def run(self, entry: GraphEntry, feeds: dict[str, np.ndarray], n_real: int) -> GraphOutput:
        sess = self.session(entry)
        started = time.perf_counter()
        outputs = sess.run(None, feeds)
        seconds = time.perf_counter() - started
        names = [o.name for o in sess.get_outputs()]
        by_name = dict(zip(names, outputs, strict=True))
        return GraphOutput(
            logits=by_name["logits"][0, :n_real] if "logits" in by_name else None,
            new_keys=[by_name[new_key_name(layer)] for layer in range(self.num_layers)],
            new_values=[by_name[new_value_name(layer)] for layer in range(self.num_layers)],
            seconds=seconds,
            hidden=by_name[HIDDEN_STATES][0, :n_real] if HIDDEN_STATES in by_name else None,
            layer_hidden=by_name[LAYER_HIDDEN][0, :n_real] if LAYER_HIDDEN in by_name else None,
        )

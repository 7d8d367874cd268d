"""onnxruntime sessions over a bundle's graphs, one per width, and the choice of graph for a block."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnxruntime as ort

from .bundle import BundleError, GraphEntry, Manifest
from .contract import HIDDEN_STATES, LAYER_HIDDEN, new_key_name, new_value_name, present_key_name
from .kernels import NATIVE_LABEL, KernelsUnavailable, library
from .qnn import DISABLE_CPU_FALLBACK, QNN_EP, add_qnn_provider, check_qnn_bundle

log = logging.getLogger(__name__)

# Every graph is its own session with its own intra-op thread pool, and onnxruntime's workers spin for a while
# after a run. A drafter's steps switch widths, so the last width's spinning workers took the cores from the
# next call: at 2 threads a width-1 call between width-4 calls cost 28.8 ms instead of 13.6, and the cost table
# read a width-4 call at 2.9x a width-1 call instead of 1.5x. With the workers stopped when a run returns,
# cost-aware lookup went from 1.055x to 1.172x plain decoding, and plain decoding itself did not change
# (0.996x): benchmarks/results/fast/spinning/ab_2threads.json. One thread has no pool, so nothing changes there.
SESSION_DEFAULTS = {"session.force_spinning_stop": "1"}


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
    # rows [0, rows_in_cache) whose keys and values the graph itself wrote into the host cache at columns
    # n_past + i (in-place graphs, contract v2): committing them is free (Engine.commit)
    rows_in_cache: int = 0

    def rows_from(self, start: int) -> GraphOutput:
        """The outputs of rows start.. only: what a drafter whose tree begins at row `start` reads."""
        if start == 0:
            return self
        def cut(rows: np.ndarray | None) -> np.ndarray | None:
            return None if rows is None else rows[start:]

        return GraphOutput(cut(self.logits), [k[:, :, start:] for k in self.new_keys],
                           [v[:, :, start:] for v in self.new_values], self.seconds, cut(self.hidden),
                           cut(self.layer_hidden), max(0, self.plain_rows - start), max(0, self.rows_in_cache - start))


class GraphSet:
    """Sessions for every graph of a bundle, created on first use or all at once by `load_all`."""

    def __init__(self, folder: Path, manifest: Manifest, threads: int | None = None,
                 providers: list | None = None, session_options: dict[str, str] | None = None) -> None:
        self.folder = folder
        self.manifest = manifest
        self.entries = sorted(manifest.graphs, key=lambda g: g.width)
        self.threads = threads
        self.providers = providers or ["CPUExecutionProvider"]
        self.session_options = {**SESSION_DEFAULTS, **(session_options or {})}
        check_qnn_bundle(manifest, self.providers)
        self._sessions: dict[str, ort.InferenceSession] = {}
        self._in_place: dict[str, _InPlaceCall] = {}
        self.num_layers = manifest.config.num_layers
        # the most slots a decode step may use (read every step by the decode loop): see max_decode_width
        self._max_decode_width = max((e.width for e in self.entries if e.kind == "decode"),
                                     default=self.entries[-1].width)

    @property
    def max_width(self) -> int:
        return self.entries[-1].width

    @property
    def max_decode_width(self) -> int:
        """The most slots a decode step may use: the widest decode graph. Drafted blocks never spill into a
        wider prefill graph: plain decoding runs the narrowest decode graph, and only the decode graphs are
        probed for computing its rows bit for bit (runtime/row_probe.py); on the HTP the graphs of two
        different widths do not (benchmarks/results/quant/smollm2-width-invariance-htp.log)."""
        return self._max_decode_width

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

    def load_within(self, positions: int) -> None:
        """Create the sessions a sequence of up to `positions` cache positions can call: every graph of the
        context buckets up to the smallest that holds them (the cache works in the smallest bucket that holds
        what it must: kv_cache.py)."""
        contexts = sorted({e.context for e in self.entries})
        reach = next((c for c in contexts if c >= positions), contexts[-1])
        for entry in self.entries:
            if entry.context <= reach:
                self.session(entry)

    def session(self, entry: GraphEntry) -> ort.InferenceSession:
        if entry.name not in self._sessions:
            opts = ort.SessionOptions()
            if self.threads:
                opts.intra_op_num_threads = self.threads
                opts.inter_op_num_threads = 1
            for key, value in self.session_options.items():
                opts.add_session_config_entry(key, value)
            if NATIVE_LABEL in entry.precision:
                opts.register_custom_ops_library(str(native_library()))
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
        """One call. A graph with present outputs writes the block's rows into the cache buffers it is fed
        (`past_*`), in place (contract.py); columns below the rows' slots are never written."""
        sess = self.session(entry)
        in_place = present_key_name(0) in entry.outputs
        if in_place:
            call = self._in_place.get(entry.name) or self._in_place.setdefault(entry.name, _InPlaceCall(sess, entry))
            by_name, seconds = call.run(feeds, n_real)
        else:
            started = time.perf_counter()
            outputs = sess.run(None, feeds)
            seconds = time.perf_counter() - started
            by_name = dict(zip([o.name for o in sess.get_outputs()], outputs, strict=True))
        return GraphOutput(
            logits=by_name["logits"][0, :n_real] if "logits" in by_name else None,
            new_keys=[by_name[new_key_name(layer)] for layer in range(self.num_layers)],
            new_values=[by_name[new_value_name(layer)] for layer in range(self.num_layers)],
            seconds=seconds,
            hidden=by_name[HIDDEN_STATES][0, :n_real] if HIDDEN_STATES in by_name else None,
            layer_hidden=by_name[LAYER_HIDDEN][0, :n_real] if LAYER_HIDDEN in by_name else None,
            rows_in_cache=n_real if in_place else 0,
        )


class _InPlaceCall:
    """A graph's I/O binding: its present outputs bound to the cache buffers it reads (so the graph writes the
    block's rows into the host cache, no copy of the cache), its other outputs to buffers of its own, bound
    once; only the small inputs are bound per call. Logits and hidden states are returned as copies (callers keep
    them); the block's new keys and values as views of the bound buffers, valid until this graph's next call
    (they are committed, or compared, before it: copying 2 x layers small arrays was ~0.25 ms of host time per
    width-1 call)."""

    def __init__(self, sess: ort.InferenceSession, entry: GraphEntry) -> None:
        self.sess, self.binding = sess, sess.io_binding()
        self.outputs = {name: np.empty(dims, np.float32) for name, dims in entry.outputs.items()
                        if not name.startswith("present_")}
        for name, buffer in self.outputs.items():
            self.binding.bind_ortvalue_output(name, ort.OrtValue.ortvalue_from_numpy(buffer))
        self.caches: dict[str, np.ndarray] = {}  # past input -> the buffer bound to it and its present output

    def run(self, feeds: dict[str, np.ndarray], n_real: int) -> tuple[dict[str, np.ndarray], float]:
        for name, value in feeds.items():
            if not name.startswith("past_"):
                self.binding.bind_cpu_input(name, value)
            elif self.caches.get(name) is not value:  # a cache buffer this binding has not seen: bind it once
                cache = ort.OrtValue.ortvalue_from_numpy(value)
                self.binding.bind_ortvalue_input(name, cache)
                self.binding.bind_ortvalue_output("present_" + name.removeprefix("past_"), cache)
                self.caches[name] = value  # also keeps the buffer alive while bound
        started = time.perf_counter()
        self.sess.run_with_iobinding(self.binding)
        seconds = time.perf_counter() - started
        return {name: buffer if name.startswith("new_") else (buffer[:, :n_real] if buffer.ndim == 3 else buffer).copy()
                for name, buffer in self.outputs.items()}, seconds


def native_library() -> Path:
    """mtpedge's kernel library, for graphs whose precision label says they need it."""
    try:
        return library()
    except KernelsUnavailable as err:
        raise BundleError(f"this bundle's weight products run on mtpedge's own kernels, unavailable here: {err}. "
                          "Or re-export the bundle with --kernels onnxruntime") from err

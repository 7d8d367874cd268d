"""Does this bundle, on this machine, compute a drafted chain's rows bit for bit as plain decoding does?

Lossless drafting rests on it (runtime/contract.py): the verifier reads only a block's leading chain, whose rows
must be exactly the rows plain decoding's calls (the narrowest decode graph, one token each) would compute.
Whether they are depends on the kernels onnxruntime picks for this machine, not on the bundle alone. MLAS's
int8-activation `MatMulNBits` computes a row alike at every width on AVX-512 VNNI, but on an AVX2-only CPU it
sends one-row 4-bit products with 32- or 64-input blocks to a one-row kernel of their own (16-input blocks and
8-bit weights stay on one kernel): the fast bundle's root rows then differ by ~0.7 in logits between widths
(benchmarks/results/fast/README.md, section 13). So the property is probed once per bundle and machine, in
about a second, and cached beside the cost tables:

    probe = row_probe_for(engine, cache_dir)     # cached, or measured now
    probe.invariant                               # False: decode plainly by default, warn when a drafter is named

The probe runs a chain of tokens through every decode graph wider than 1 and compares each row (logits and new
keys) with plain decoding's calls from the same cache. On a bundle with one decode graph (the QDQ / QNN default)
plain decoding runs that graph too, and the probe asks whether a row's result depends on its slot or on the
other slots' tokens: on the HTP simulator it does not, where two widths differ (benchmarks/results/quant/
smollm2.md, "One decode width"). A probe that finds no difference does not prove the property for every input;
a kernel that sums differently shows up on every row (0 of 12 steps were bit-identical on AVX2), which is what
the probe is for.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from .cost_measure import cache_file, machine_description
from .cost_table import decode_widths
from .engine import Engine
from .qnn import QNN_EP

PROBE_FORMAT = "mtpedge-row-probe"
PROBE_VERSION = 1
PREFIX = 24  # cached positions the probe's chains attend to


@dataclass(frozen=True)
class RowProbe:
    """max_diff: per decode width, the largest |difference| between a chain row and plain decoding's row."""

    max_diff: dict[int, float]
    device: str

    @property
    def invariant(self) -> bool:
        return all(d == 0.0 for d in self.max_diff.values())

    def describe(self) -> str:
        if self.invariant:
            return f"wide calls compute a chain's rows as plain decoding's calls do on {self.device}"
        worst = max(self.max_diff, key=self.max_diff.get)
        return (f"on {self.device}, this bundle's graphs compute a drafted chain's rows differently from plain "
                f"decoding (width {worst}: logits or keys up to {self.max_diff[worst]:.2g} apart; the kernels, e.g. "
                "MLAS's one-row int8 kernel on AVX2, or the HTP at another width), so drafting is not "
                "token-identical to plain decoding here")


def probe_rows(engine: Engine) -> RowProbe:
    """Compare every decode width's chain rows with plain decoding's; the engine is left reset."""
    calls, seconds = engine.graph_calls, engine.graph_seconds
    vocab = engine.config.vocab_size
    prefix = (np.arange(PREFIX, dtype=np.int64) * 7919 + 11) % vocab  # fixed, arbitrary token ids
    widths = [w for w in decode_widths(engine.manifest) if w > 1]
    chain = (np.arange(max(widths, default=1), dtype=np.int64) * 104729 + 3) % vocab  # each width runs a prefix
    diffs = {}
    try:
        engine.reset()
        engine.prefill(prefix)
        plain = []  # plain decoding's rows of the chain: (logits, new key of each layer)
        for token in chain if widths else ():
            out = engine.run_block(engine.embed(np.array([token])), np.array([-1]))
            engine.cache.commit_accepted_kv(out.new_keys, out.new_values, [0])
            plain.append((out.logits[0].copy(), [k[:, :, 0].copy() for k in out.new_keys]))
        for width in widths:
            engine.cache.truncate(PREFIX)
            wide = engine.run_block(engine.embed(chain[:width]), np.arange(-1, width - 1))
            diffs[width] = max(_row_gap(wide, i, *plain[i]) for i in range(min(width, wide.plain_rows)))
    finally:
        engine.reset()
        engine.graph_calls, engine.graph_seconds = calls, seconds
    return RowProbe(diffs, machine_description(engine))


def _row_gap(wide, row: int, logits: np.ndarray, keys: list[np.ndarray]) -> float:
    """Largest |difference| of a wide call's row (logits and every layer's new key) from plain decoding's."""
    key_gap = max(float(np.abs(k[:, :, row] - key).max()) for k, key in zip(wide.new_keys, keys, strict=True))
    return max(float(np.abs(wide.logits[row] - logits).max()), key_gap)


def row_probe_for(engine: Engine, cache_dir: Path | None, refresh: bool = False,
                  say: Callable[[str], None] = print) -> RowProbe:
    """The cached probe of this bundle on this machine, or a new one (saved when the folder allows)."""
    path = cache_file(engine, cache_dir, ".rows.json") if cache_dir is not None else None
    if path is not None and path.is_file() and not refresh:
        try:
            data = json.loads(path.read_text())
            if data.get("format") == PROBE_FORMAT and data.get("version") == PROBE_VERSION:
                return RowProbe({int(w): float(d) for w, d in data["max_diff"].items()}, str(data["device"]))
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            pass
        say(f"the cached row probe {path} is unreadable: probing again")
    if QNN_EP in engine.graphs.providers:  # seconds a call on the x86 simulator (milliseconds on a phone)
        say(f"probing whether drafted rows equal plain decoding's on the HTP ({engine.graphs.max_decode_width + 2} "
            "graph calls, once per bundle and machine)")
    probe = probe_rows(engine)
    if path is not None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f".{path.name}.partial-{os.getpid()}")
            tmp.write_text(json.dumps({"format": PROBE_FORMAT, "version": PROBE_VERSION, **asdict(probe)}))
            os.replace(tmp, path)
        except OSError as err:
            say(f"cannot save the row probe in {cache_dir} ({err.strerror or err}): probed in memory for this run")
    return probe

"""The quality report of a quantized bundle against the float32 bundle it came from.

    perplexity      of both bundles on HELD_TEXT (written for this purpose; in no training set we know of)
    top1_agreement  share of HELD_TEXT positions where both bundles' argmax agree (teacher forcing)
    greedy_match    per prompt, how many of the first GREEDY_TOKENS greedy tokens are equal before they diverge
    tau             tokens per call of every registered drafter, float vs quantized (greedy, same prompts)
    latency_ms      median graph call at each graph width, both bundles interleaved in one process

Both bundles run through the same Engine code the runtime uses, so the report measures what a user gets.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np

from mtpedge.models.held_text import HELD_TEXT
from mtpedge.runtime.bundle import Manifest, write_manifest
from mtpedge.runtime.engine import Engine
from mtpedge.runtime.generate import accepted_drafts, generate

log = logging.getLogger(__name__)

PROMPTS = (
    "Write a short poem about the sea.",
    "Explain in two sentences why the sky is blue.",
    "List three uses of a paperclip.",
)
GREEDY_TOKENS = 32
LATENCY_CALLS = 7


def sequence_logits(engine: Engine, ids: list[int]) -> np.ndarray:
    """(T, V) logits of every position of `ids`, run in chunks of the widest graph from an empty cache."""
    engine.reset()
    chunk = engine.graphs.max_width
    rows = []
    for start in range(0, len(ids), chunk):
        part = np.asarray(ids[start:start + chunk])
        out = engine.run_block(engine.embed(part), np.arange(-1, part.size - 1))
        engine.cache.commit_accepted_kv(out.new_keys, out.new_values, np.arange(part.size))
        rows.append(out.logits)
    engine.reset()
    return np.concatenate(rows)


def perplexity(logits: np.ndarray, ids: list[int]) -> float:
    shifted = logits[:-1].astype(np.float64)
    top = shifted.max(-1, keepdims=True)
    log_probs = shifted - top - np.log(np.exp(shifted - top).sum(-1, keepdims=True))
    return float(np.exp(-log_probs[np.arange(len(ids) - 1), ids[1:]].mean()))


def _prompt_ids(engine: Engine, prompt: str) -> list[int]:
    ids = engine.tokenizer.encode_chat([{"role": "user", "content": prompt}])
    return ids[: engine.context // 2]  # tiny test bundles have tiny contexts


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def _latency_ms(engines: dict[str, Engine], width: int) -> dict[str, float]:
    """Median graph call at `width`, alternating between the engines so that load noise hits both alike."""
    times: dict[str, list[float]] = {name: [] for name in engines}
    for _ in range(LATENCY_CALLS):
        for name, engine in engines.items():
            engine.reset()  # the cache's contents do not change the cost of a static-shape call
            out = engine.run_block(engine.embed(np.ones(width, np.int64)), np.arange(-1, width - 1))
            times[name].append(out.seconds * 1000)
    for engine in engines.values():
        engine.reset()
    return {name: round(float(np.median(t)), 2) for name, t in times.items()}


def quality_report(bundle: str | Path, reference: str | Path, progress: Callable[[str], None] | None = None,
                   threads: int | None = None) -> dict:
    """Compare `bundle` with the float32 `reference` bundle; returns a JSON-ready dict (and prints a summary)."""
    from mtpedge.runtime.bundle import BundleError
    from mtpedge.runtime.drafters import DRAFTERS, make_drafter

    say = progress or log.info
    started = time.perf_counter()
    engines = {"float32": Engine.load(reference, threads=threads), "quantized": Engine.load(bundle, threads=threads)}
    ref, quant = engines["float32"], engines["quantized"]
    ids = ref.tokenizer.encode(HELD_TEXT)[: ref.context]
    ref_logits, quant_logits = sequence_logits(ref, ids), sequence_logits(quant, ids)
    report: dict = {
        "held_text_tokens": len(ids),
        "perplexity": {"float32": round(perplexity(ref_logits, ids), 4),
                       "quantized": round(perplexity(quant_logits, ids), 4)},
        "top1_agreement": round(float((ref_logits.argmax(-1) == quant_logits.argmax(-1)).mean()), 4),
        "greedy_match": [], "tau": {}, "latency_ms": {},
    }
    del ref_logits, quant_logits
    for prompt in PROMPTS:
        prompt_ids = _prompt_ids(ref, prompt)
        outs = [generate(e, prompt_ids, GREEDY_TOKENS, stop_token_ids=set(), on_overflow="stop").token_ids
                for e in (ref, quant)]
        report["greedy_match"].append(_common_prefix(*outs))
    for name in sorted(n for n in DRAFTERS if not DRAFTERS[n].lossy):  # τ of what the model itself says
        try:
            make_drafter(name, ref)
        # a drafter the bundle cannot run: mtp without a trained adapter, or any when the decode graphs are one
        # slot wide (drafted blocks never run the prefill graph)
        except (BundleError, ValueError) as err:
            report.setdefault("tau_not_run", {})[name] = str(err)
            continue
        taus = {}
        for label, engine in engines.items():
            stats = [generate(engine, _prompt_ids(engine, p), GREEDY_TOKENS, stop_token_ids=set(), on_overflow="stop",
                              drafter=make_drafter(name, engine)).stats for p in PROMPTS]
            accepted = sum(accepted_drafts(s.accepted_histogram) for s in stats)
            taus[label] = round(1 + accepted / max(1, sum(s.decode_calls for s in stats)), 3)  # as tokens_per_call
        report["tau"][name] = {**taus, "change": round(taus["quantized"] - taus["float32"], 3)}
    if not DRAFTERS:
        report["tau_note"] = "no drafter is registered: tau not measured"
    widths = sorted({g.width for g in ref.manifest.graphs})
    for width in widths:
        report["latency_ms"][str(width)] = _latency_ms(engines, width)
    report["seconds"] = round(time.perf_counter() - started, 1)
    say(format_report(report))
    return report


def format_report(report: dict) -> str:
    ppl, lat = report["perplexity"], report["latency_ms"]
    lines = [f"quality vs float32: top-1 agreement {report['top1_agreement']:.1%} over {report['held_text_tokens']} "
             f"held-out tokens; perplexity {ppl['quantized']:.3f} (float32 {ppl['float32']:.3f}); greedy tokens equal "
             f"before divergence {report['greedy_match']} of {GREEDY_TOKENS}"]
    for width, ms in lat.items():
        lines.append(f"  width {width}: {ms['quantized']:.1f} ms per call (float32 {ms['float32']:.1f} ms, "
                     f"x{ms['float32'] / max(ms['quantized'], 1e-9):.2f})")
    for name, tau in report["tau"].items():
        lines.append(f"  drafter {name}: tau {tau['quantized']:.2f} (float32 {tau['float32']:.2f})")
    if "tau_note" in report:
        lines.append(f"  {report['tau_note']}")
    return "\n".join(lines)


def write_manifest_with_quality(folder: Path, src: Path, manifest: Manifest, with_report: bool,
                                say: Callable[[str], None]) -> None:
    """Write a quantized bundle's manifest, then add its quality report against the float bundle `src` if
    asked (the report loads the bundle itself, so the manifest is written first)."""
    write_manifest(folder, manifest)
    if with_report:
        report = quality_report(folder, src, progress=say)
        write_manifest(folder, replace(manifest, extras={**manifest.extras, "quality": report}))

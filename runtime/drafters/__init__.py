"""Drafters: each proposes a draft tree per step (the `Drafter` protocol in base.py), named by one spec.

`parse_drafter("hybrid:width=32")` checks a spec against the registry below (before any engine loads), and
`make_drafter(spec, engine)` is the one way the CLI, the server and the benchmarks get a drafter; "none" means
plain decoding (no drafter). Options may also be given as keywords, e.g.
    make_drafter("esp", engine, masks=1, mask_init="mean", tree="static:6,1", width=16)
    make_drafter("mtp", engine, mtp_layout="tree", width=16)  # needs a bundle with a trained adapter
`describe_drafters()` is the help text: every drafter with its options.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .base import NONE, Drafter, DrafterSpec, check_fits, describe, make_spec, parse_spec, split_specs
from .dmtd import DmtdDrafter, DmtdSpecDrafter
from .esp import EspDrafter
from .hybrid import HybridDrafter
from .lookup import LookupDrafter
from .mtp import MtpDrafter

if TYPE_CHECKING:
    from ..engine import Engine

DRAFTERS: dict[str, type[Drafter]] = {cls.name: cls for cls in (
    EspDrafter, LookupDrafter, HybridDrafter, MtpDrafter, DmtdSpecDrafter, DmtdDrafter)}

# What generate, chat, serve and scripts/run.sh decode with when no drafter is named, on a bundle where drafting
# is lossless: the drafter that was fastest on Spec-Bench questions the headline bench does not use (the tuning
# run in benchmarks/results/fast/README.md, section 5), with its trees sized by the measured cost table.
DEFAULT_DRAFTER = "lookup"


def default_drafter(manifest) -> str:
    """The drafter a bundle decodes with when none is named: DEFAULT_DRAFTER on float32 graphs, plain decoding on
    quantized ones, where drafting is not token-identical to plain decoding:
    - the fast bundle (every 4-bit MatMul on onnxruntime's int8-activation kernels, extras "quantization"): a wide
      call's root row is bit for bit the width-1 call's, but a row after it attends to the block's earlier keys
      appended after the cache, not in cache order as plain decoding's later call does: a different summation
      order, ~4e-5 apart in logits on float32 graphs, which the int8 activation rounding of the next layers grows
      to ~1.1 (benchmarks/results/fast/README.md, section 8); a drafted answer left plain decoding's on 1 of 21
      tuning turns;
    - QDQ a16w8 graphs (extras "qdq"): even the root row differs from the width-1 call, on the CPU's QDQ emulation
      by up to 0.67, argmax flipped at 3 of 40 steps (benchmarks/results/quant/smollm2-width-invariance-cpu-qdq.log:
      the recipe's fp16 nodes; an all-integer QDQ graph was width-invariant on the tiny model), and compiled for
      the HTP (extras "qnn", which keep "qdq") on the simulator by 0.055 and 0.11 at the two steps measured
      (smollm2-width-invariance-htp.log), nonzero on the tiny model with or without fp16 nodes
      (tiny-htp-width-invariance.log), static scales notwithstanding."""
    extras = manifest.extras or {}
    return NONE if extras.get("quantization") or extras.get("qdq") else DEFAULT_DRAFTER


__all__ = ["DEFAULT_DRAFTER", "DRAFTERS", "NONE", "Drafter", "DrafterSpec", "check_fits", "default_drafter",
           "describe_drafters", "drafter_names", "make_drafter", "parse_drafter", "split_specs"]


def drafter_names() -> list[str]:
    return [NONE, *sorted(DRAFTERS)]


def parse_drafter(spec: str | DrafterSpec) -> DrafterSpec:
    """A checked DrafterSpec from its text ("hybrid:width=32:masks=2"); ValueError naming the problem."""
    return spec if isinstance(spec, DrafterSpec) else parse_spec(spec, DRAFTERS)


def describe_drafters() -> str:
    return describe(DRAFTERS)


def make_drafter(spec: str | DrafterSpec, engine: Engine, **options: Any) -> Drafter | None:
    """The drafter a spec names, on this engine (None for plain decoding); keyword options add to the spec's."""
    spec = parse_drafter(spec)
    if options:
        spec = make_spec(spec.name, {**spec.kwargs, **options}, DRAFTERS)
    if spec.name == NONE:
        return None
    check_fits(spec, [entry.width for entry in engine.graphs.entries])
    cls = DRAFTERS[spec.name]
    return cls(engine, cls.Options(**spec.kwargs))

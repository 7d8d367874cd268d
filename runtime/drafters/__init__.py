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

# What generate, chat, serve and scripts/run.sh decode with when no drafter is named: the lossless drafter that
# was fastest on the fast bundle, on Spec-Bench questions the headline bench does not use (the tuning run in
# benchmarks/results/fast/README.md, section 5), with its trees sized by the measured cost table.
DEFAULT_DRAFTER = "lookup"

__all__ = ["DEFAULT_DRAFTER", "DRAFTERS", "NONE", "Drafter", "DrafterSpec", "check_fits", "describe_drafters",
           "drafter_names", "make_drafter", "parse_drafter", "split_specs"]


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

"""Drafters: each proposes a draft tree per step (see `mtpedge.runtime.generate.Drafter`).

`make_drafter(name, engine, **options)` is the one way the CLI, the server and the benchmarks get one;
"none" means plain decoding (no drafter). Options are the drafter class's keyword arguments, e.g.
    make_drafter("esp", engine, masks=1, mask_init="mean", mask_update=0.1, tree="static:6,1", width=16)
    make_drafter("lookup", engine, width=8, max_ngram=3)
    make_drafter("hybrid", engine, masks=1, width=16, branches=2)
    make_drafter("mtp", engine, mtp_layout="tree", width=16)  # needs a bundle with a trained adapter
Options a drafter does not take are ignored only if their value is None (so a CLI can pass all of them).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable

from ..engine import Engine
from ..generate import Drafter
from .esp import EspDrafter
from .hybrid import HybridDrafter
from .lookup import LookupDrafter
from .mtp import MtpDrafter

# name -> factory(engine, **options)
DRAFTERS: dict[str, Callable[..., Drafter]] = {
    "esp": EspDrafter,
    "lookup": LookupDrafter,
    "hybrid": HybridDrafter,
    "mtp": MtpDrafter,
}


def drafter_names() -> list[str]:
    return ["none", *sorted(DRAFTERS)]


def make_drafter(name: str, engine: Engine, **options) -> Drafter | None:
    if name == "none":
        return None
    if name not in DRAFTERS:
        raise ValueError(f"unknown drafter {name!r}: choose one of {', '.join(drafter_names())}")
    factory = DRAFTERS[name]
    accepted = inspect.signature(factory).parameters
    options = {key: value for key, value in options.items() if value is not None}
    unknown = sorted(set(options) - set(accepted))
    if unknown:
        raise ValueError(f"drafter {name!r} takes no option {', '.join(unknown)}; its options: "
                         f"{', '.join(p for p in accepted if p != 'engine')}")
    return factory(engine, **options)

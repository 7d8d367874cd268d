"""Drafters: each proposes a draft tree per step (see `mtpedge.runtime.generate.Drafter`).

`make_drafter(name, engine, **options)` is the one way the CLI, the server and the benchmarks get one;
"none" means plain decoding (no drafter).
"""

from __future__ import annotations

from collections.abc import Callable

from ..engine import Engine
from ..generate import Drafter

# name -> factory(engine, **options); drafter modules register themselves here
DRAFTERS: dict[str, Callable[..., Drafter]] = {}


def drafter_names() -> list[str]:
    return ["none", *sorted(DRAFTERS)]


def make_drafter(name: str, engine: Engine, **options) -> Drafter | None:
    if name == "none":
        return None
    if name not in DRAFTERS:
        raise ValueError(f"unknown drafter {name!r}: choose one of {', '.join(drafter_names())}")
    return DRAFTERS[name](engine, **options)

"""What a drafter is, and the one way to name one with its settings: a spec such as "hybrid:width=32:masks=2".

A drafter proposes a draft tree each step (`Drafter`); the decode loop (runtime/generate.py) verifies it in one
graph call. Each drafter class declares its settings as a frozen dataclass, `Options`, whose fields (type,
default, help, choices) are what a spec is checked against and what the help text lists; the dataclass's
`__post_init__` checks what it can without a bundle. So a misspelt option, a value of the wrong type or an
impossible setting is refused when the spec is parsed, before any engine loads, naming the valid options.

Spec syntax: NAME[:KEY=VALUE]...; `-` and `_` in keys are the same; a piece without `=` continues the previous
value (esp:tree=static:6,1). Values are read as the option's declared type: int, float, bool (true / false) or
str.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

import numpy as np

if TYPE_CHECKING:  # the drafter registry is read for help text, so it must not import onnxruntime
    from ..engine import Engine
    from ..graphs import GraphOutput
    from ..tree import DraftTree
    from ..tree_sizing import StepSizer

NONE = "none"  # plain decoding: no drafter


def option(default: Any, help: str, choices: tuple[str, ...] | None = None) -> Any:
    """A field of a drafter's Options dataclass: its default, one line of help, and the allowed values (if few)."""
    return field(default=default, metadata={"help": help, "choices": choices})


class Drafter(Protocol):
    """Proposes a draft tree rooted at `root` (the newest token, not yet in the cache) each step.

    Every attribute and method the decode loop reads is declared here; drafter classes subclass this protocol
    and inherit the defaults.
    """

    name: ClassVar[str]
    Options: ClassVar[type]  # the frozen dataclass of the drafter's settings
    # The loop verifies the tree against the drafter's own logits (`own_logits`), not the model's: the output
    # is the drafter's, NOT the model's. Such a drafter decodes greedily, and the stats say `lossless: false`.
    lossy: ClassVar[bool] = False
    settings: dict  # the resolved settings, recorded in the stats
    lora_on_slots: bool = False  # gate 1 at SLOT nodes (an adapter's learned masks), 0 at token nodes
    # a drafter that sizes its trees from the engine's cost table (tree_sizing.StepSizer) says so (`sized`), so
    # that a caller measures the table only when it is read; its predicted vs achieved tokens/s go into the stats
    sized: ClassVar[bool] = False
    sizer: StepSizer | None = None

    def start(self, engine: Engine, prompt_ids: Sequence[int]) -> None:
        """A new generation begins (called before the prompt runs)."""

    def observe_prefill(self, out: GraphOutput) -> None:
        """One chunk of the prompt ran (in order): its rows' outputs."""

    def propose(self, context_ids: Sequence[int], root: int, lead: int = 0
                ) -> tuple[DraftTree, np.ndarray | None]:
        """The tree and the embeddings of its SLOT nodes (None if it has none). `lead`: the block has that many nodes
        before this tree's root (drafts carried from the last call, runtime/generate.py), so the tree should fit
        the widest decode graph beside them; a drafter whose trees have a fixed shape may not, and the loop then does
        without the carried drafts."""
        ...

    def own_logits(self, out: GraphOutput) -> np.ndarray:
        """Lossy drafters only: the drafter's logits for the rows of `out` (the last prompt chunk, or the
        tree of this step), used by the loop in place of the model's."""
        raise NotImplementedError(f"{self.name} is not a lossy drafter")

    def observe(self, tree: DraftTree, out: GraphOutput, path: list[int]) -> None:
        """The call's outputs, and the accepted path (node indices, root first)."""

    def step_kinds(self) -> dict[str, int] | None:
        """A drafter that drafts in more than one way: how many of this generation's steps took each (the stats'
        `drafter_steps`); None for the rest."""
        return None


@dataclass(frozen=True)
class DrafterSpec:
    """A drafter name and the options given for it (the rest keep the drafter's defaults); hashable."""

    name: str
    options: tuple[tuple[str, Any], ...] = ()

    @property
    def kwargs(self) -> dict[str, Any]:
        return dict(self.options)

    def __str__(self) -> str:
        return ":".join([self.name, *(f"{key}={_format(value)}" for key, value in self.options)])


def _format(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def option_fields(options_class: type) -> dict[str, tuple[Any, dataclasses.Field]]:
    """name -> (declared type, field) of an Options dataclass."""
    hints = typing.get_type_hints(options_class)
    return {f.name: (hints[f.name], f) for f in dataclasses.fields(options_class)}


def _base_type(declared: Any) -> Any:
    """int | None -> int (None means "the drafter decides"); other types as they are."""
    if typing.get_origin(declared) in (typing.Union, types.UnionType):
        return next(a for a in typing.get_args(declared) if a is not type(None))
    return declared


TYPE_WORDS = {int: "an integer", float: "a number", bool: "true or false", str: "a string"}
TRUE, FALSE = ("true", "1", "yes"), ("false", "0", "no")


def _from_text(kind: Any, text: str) -> Any:
    text = text.strip().lower()
    if kind is bool:
        if text not in TRUE + FALSE:
            raise ValueError(text)
        return text in TRUE
    return kind(text)


def _is_a(kind: Any, value: Any) -> bool:
    if kind is bool or kind is str:
        return isinstance(value, kind)
    if isinstance(value, bool):
        return False
    if kind is int:
        return isinstance(value, int)
    return isinstance(value, int | float) and math.isfinite(value)  # a float option


def _convert(drafter: str, key: str, declared: Any, value: Any) -> Any:
    """`value` (text from a spec, or a Python value) as the option's declared type; ValueError if it is not one."""
    kind = _base_type(declared)
    problem = ValueError(f"drafter {drafter!r}: option {key} takes {TYPE_WORDS[kind]}, got {value!r}")
    if isinstance(value, str) and kind is not str:
        try:
            value = _from_text(kind, value)
        except ValueError as err:
            raise problem from err
    if not _is_a(kind, value):
        raise problem
    return float(value) if kind is float else value


def make_spec(name: str, options: Mapping[str, Any], registry: Mapping[str, type]) -> DrafterSpec:
    """A checked spec: the name is registered, every option is declared, of its type, and the drafter's
    Options accept them together. Options given as None are left out (the drafter's default)."""
    options = {key.replace("-", "_"): value for key, value in options.items() if value is not None}
    if name == NONE:
        if options:
            raise ValueError(f"plain decoding ({NONE}) takes no options, got {', '.join(options)}")
        return DrafterSpec(NONE)
    if name not in registry:
        raise ValueError(f"unknown drafter {name!r}: choose one of {', '.join([NONE, *sorted(registry)])} "
                         "(`mtpedge drafters` lists them with their options)")
    options_class = registry[name].Options
    declared = option_fields(options_class)
    unknown = sorted(set(options) - set(declared))
    if unknown:
        raise ValueError(f"drafter {name!r} takes no option {', '.join(unknown)}; its options: "
                         f"{', '.join(declared) or '(none)'}")
    values = {key: _convert(name, key, declared[key][0], value) for key, value in options.items()}
    for key, value in values.items():
        choices = declared[key][1].metadata.get("choices")
        if choices and value not in choices:
            raise ValueError(f"drafter {name!r}: unknown {key.replace('_', ' ')} {value!r}: choose "
                             f"{', '.join(choices[:-1])} or {choices[-1]}")
    try:
        options_class(**values)  # its __post_init__ checks what needs no bundle
    except ValueError as err:
        raise ValueError(f"drafter {name!r}: {err}") from err
    return DrafterSpec(name, tuple((key, values[key]) for key in declared if key in values))


def parse_spec(text: str, registry: Mapping[str, type]) -> DrafterSpec:
    """"hybrid:width=32:masks=2" -> DrafterSpec("hybrid", (("masks", 2), ("width", 32))), checked (options in the
    order the drafter declares them)."""
    name, *pieces = text.strip().split(":")
    if not name:
        raise ValueError(f"drafter spec {text!r} has no name: write NAME[:KEY=VALUE]..., e.g. hybrid:width=32")
    options: dict[str, str] = {}
    last = None
    for piece in pieces:
        key, sep, value = piece.partition("=")
        if not sep:
            if last is None:
                raise ValueError(f"drafter spec {text!r}: options are KEY=VALUE after the name, e.g. "
                                 "hybrid:width=32:masks=2")
            options[last] += ":" + piece  # a value with a colon in it (esp:tree=static:6,1)
            continue
        if not key or not value:
            raise ValueError(f"drafter spec {text!r}: {piece!r} is not KEY=VALUE")
        last = key.strip().replace("-", "_")
        if last in options:
            raise ValueError(f"drafter spec {text!r} gives option {last} twice")
        options[last] = value
    return make_spec(name.strip(), options, registry)


def split_specs(text: str) -> list[str]:
    """A comma-separated list of specs; a comma followed by a digit is inside a value (esp:tree=static:6,1)."""
    specs: list[str] = []
    for piece in text.split(","):
        if specs and piece[:1].isdigit():
            specs[-1] += "," + piece
        elif piece.strip():
            specs.append(piece.strip())
    return specs


def describe(registry: Mapping[str, type]) -> str:
    """Every drafter with its options, defaults and help: the help text of `mtpedge drafters`."""
    lines = [f"{NONE}: plain decoding (no drafter; the baseline)"]
    for name in sorted(registry):
        cls = registry[name]
        summary = (cls.__doc__ or "").strip().splitlines()[0]
        lines.append(f"{name}: {summary}{'  [LOSSY]' if cls.lossy else ''}")
        for key, (declared, f) in option_fields(cls.Options).items():
            kind = _base_type(declared).__name__
            choices = f.metadata.get("choices")
            values = "|".join(choices) if choices else kind
            default = "auto" if f.default is None else _format(f.default)
            lines.append(f"    {key}={values} (default {default}): {f.metadata.get('help', '')}")
    lines.append("spec: NAME[:KEY=VALUE]..., e.g. hybrid:width=32:masks=2")
    return "\n".join(lines)


def sizer_for(engine: Engine) -> StepSizer | None:
    """A StepSizer over the engine's cost table, or None when the engine has none (trees fill their width)."""
    if engine.cost_table is None:
        return None
    from ..tree_sizing import StepSizer

    return StepSizer(engine.cost_table)


def width_for(engine: Engine, width: int) -> int:
    """A drafter's slots per call: its width option, capped by the bundle's widest decode graph (so that a
    default fits every bundle; a width asked for explicitly above it is refused by `check_fits`)."""
    return min(width, engine.graphs.max_decode_width)


def check_fits(spec: DrafterSpec, decode_widths: Sequence[int]) -> None:
    """Refuse a width the bundle's decode graphs cannot hold (checked from the manifest, before an engine
    loads; runtime.cost_table.decode_widths). Drafted blocks never run through a prefill graph (GraphSet)."""
    width = spec.kwargs.get("width")
    if width is not None and width > max(decode_widths):
        raise ValueError(f"{spec}: width {width} is above this bundle's widest decode graph ({max(decode_widths)} "
                         f"slots): use width={max(decode_widths)} or less, or export with a wider --decode-widths")

"""ESP: training-free multi-token drafting by mask-token probing (methods.md section 1).

Every step is ONE graph call over `[root | tree nodes | k masks after each node]`. The call verifies the
tree, and the k mask slots under the deepest accepted node forecast the k tokens after the next root:
they seed the next tree, so drafting costs no extra call. The first step after prefill has no forecast
yet and runs the root and its masks alone.

Trees ("top-1 expansion": depth i comes from mask i, only depth i-1's best node gets children):
    static  per-depth widths [K1, ..., Kk]; fixed shape, so the bundle's precomputed layout applies;
    dynamic ESP's dynamic tree: depth i offers its top (B - i) tokens scored P(parent) * p_i(token),
            the B - 1 best scores over all depths are kept (B = width // (k + 1) token nodes).
A candidate equal to its parent's token is replaced by the next best (pruning).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ..tree import DraftTree
from ..tree_build import (
    MAX_MASK_SLOTS,
    attach_mask_slots,
    default_static_widths,
    mask_pool,
    mask_slot_index,
    select_tree,
    softmax_rows,
    static_tree,
)
from .base import Drafter, option, width_for
from .mask_embeddings import MASK_INITS, MaskConfig, MaskEmbeddings

if TYPE_CHECKING:
    from ..engine import Engine
    from ..graphs import GraphOutput

TREE_KINDS = ("static", "dynamic")


def parse_tree_option(tree: str) -> tuple[str, tuple[int, ...] | None]:
    """"dynamic", "static" or "static:15,4" -> (kind, per-depth widths or None)."""
    kind, _, spec = tree.partition(":")
    if kind not in TREE_KINDS:
        raise ValueError(f"unknown tree {tree!r}: use dynamic, static or static:W1,W2,...")
    if kind == "dynamic" or not spec:
        return kind, None
    try:
        widths = tuple(int(w) for w in spec.split(","))
    except ValueError as err:
        raise ValueError(f"static tree widths must be integers, got {spec!r} (e.g. static:6,1)") from err
    if not widths or min(widths) < 1:
        raise ValueError(f"static tree widths must be >= 1, got {spec!r}")
    return kind, widths


class MaskProbe:
    """The mask-slot half of ESP: mask embeddings, and the forecast read from the last call's mask slots."""

    def __init__(self, engine: Engine, config: MaskConfig) -> None:
        self.config = config
        self.k = config.slots
        learned = None
        # learned masks: the adapter's; if it was trained with LoRA, its gate goes on at the mask slots
        self.lora_on_slots = False
        if config.init == "learned":
            from .mtp_head import learned_masks, mtp_extras

            learned = learned_masks(engine)
            self.lora_on_slots = bool(mtp_extras(engine).get("rank"))
        self.masks = MaskEmbeddings(config, engine.embeddings, learned)
        self.forecast: np.ndarray | None = None  # (k, vocab) logits for depths 1..k under the next root

    def start(self, prompt_ids: Sequence[int]) -> None:
        self.masks.start(prompt_ids)
        self.forecast = None

    def finish_tree(self, tokens: np.ndarray, parents: np.ndarray) -> tuple[DraftTree, np.ndarray]:
        """Mask slots under every token node, and their embeddings."""
        return attach_mask_slots(tokens, parents, self.k), self.masks.for_owners(tokens.shape[0])

    def observe(self, tree: DraftTree, n_tokens: int, out: GraphOutput, path: list[int]) -> None:
        """Read the forecast from the deepest accepted node's masks (none if it had no mask slots); fold the
        committed tokens into the masks."""
        slots = mask_slot_index(n_tokens, path[-1], self.k)
        self.forecast = None if slots is None else out.logits[slots]
        self.masks.observe_tokens(tree.tokens[np.asarray(path)])


def default_mask_init(engine: Engine) -> str:
    """Learned masks when the bundle carries them, else the vocab mean (the best training-free init, measured).

    Learned masks were trained for this job: on 12 Spec-Bench questions the hybrid's τ went 1.72 -> 2.01
    (benchmarks/results/mtp/hybrid-learned-12q.txt), ESP's 1.26 -> 1.56. A float32 export of the embedded
    default model carries them (the masks shipped in export/data, see export/learned_masks.py).
    """
    return "learned" if (engine.manifest.extras.get("mtp") or {}).get("masks_file") else "mean"


@dataclass(frozen=True)
class MaskOptions:
    """The mask-slot settings ESP and the hybrid share."""

    masks: int = option(1, f"mask slots k after each node (1-{MAX_MASK_SLOTS})")
    mask_init: str | None = option(None, "mask embedding init (default: learned when the bundle has trained masks, "
                                         "else mean)", MASK_INITS)
    mask_update: float | None = option(None, "online update rate of the mask embeddings (default 0.1; 0 for learned)")
    seed: int = option(0, "seed of the 'sample' init")

    def __post_init__(self) -> None:
        MaskConfig(init=self.mask_init or "mean", slots=self.masks,
                   update_rate=0.0 if self.mask_update is None else self.mask_update)

    def mask_config(self, engine: Engine) -> MaskConfig:
        init = self.mask_init or default_mask_init(engine)
        update = self.mask_update
        if update is None:  # the online update pulls learned masks away from what they were trained to be
            update = 0.0 if init == "learned" else 0.1
        return MaskConfig(init=init, slots=self.masks, update_rate=update, seed=self.seed)


@dataclass(frozen=True)
class EspOptions(MaskOptions):
    tree: str = option("static", "static, static:W1,W2,... (per-depth widths) or dynamic")
    width: int = option(16, "slots per decode call (tree nodes + mask slots)")

    def __post_init__(self) -> None:
        super().__post_init__()
        _, widths = parse_tree_option(self.tree)
        if widths is not None and len(widths) > self.masks:
            raise ValueError(f"static widths {list(widths)} have {len(widths)} depths but only {self.masks} mask "
                             f"slot(s) forecast them: use masks={len(widths)} or fewer depths")


class EspDrafter(Drafter):
    """training-free mask-token probing (ESP): the mask slots of one call draft the next tree"""

    name = "esp"
    Options = EspOptions

    def __init__(self, engine: Engine, options: EspOptions) -> None:
        masks = options.masks
        config = options.mask_config(engine)
        self.probe = MaskProbe(engine, config)
        self.lora_on_slots = self.probe.lora_on_slots
        self.kind, widths = parse_tree_option(options.tree)
        width = width_for(engine, options.width)
        self.nodes = width // (masks + 1)  # token nodes (root included) that fit with their mask slots
        self.max_width = engine.graphs.max_decode_width
        if self.nodes < 1:
            raise ValueError(f"a width of {width} slots cannot hold a root and its {masks} mask slot(s)")
        self.widths = widths if widths is not None else default_static_widths(self.nodes, masks)
        if self.kind == "static":
            need = (masks + 1) * (1 + sum(self.widths))
            if need > self.max_width:
                raise ValueError(f"static widths {list(self.widths)} with {masks} mask slot(s) need {need} slots, "
                                 f"the widest decode graph has {self.max_width}: re-export with a wider "
                                 "--decode-widths or use smaller widths")
        self.settings = {"drafter": self.name, "masks": masks, "mask_init": config.init,
                         "mask_update": config.update_rate, "tree": self.kind,
                         "widths": list(self.widths) if self.kind == "static" else None, "width": width}
        self._n_tokens = 1

    def start(self, engine: Engine, prompt_ids: Sequence[int]) -> None:
        self.probe.start(prompt_ids)

    def propose(self, context_ids: Sequence[int], root: int, lead: int = 0
                ) -> tuple[DraftTree, np.ndarray]:
        forecast = self.probe.forecast
        if forecast is None:
            tokens, parents = np.array([root], dtype=np.int64), np.array([-1], dtype=np.int64)
        elif self.kind == "static":
            tokens, parents = static_tree(root, forecast, self.widths)  # top tokens by logit = by probability
        else:
            nodes = max(1, min(self.nodes, (self.max_width - lead) // (self.probe.k + 1)))
            pool = mask_pool(softmax_rows(forecast), nodes - 1, root)
            tokens, parents, _ = select_tree(*pool, nodes)
        self._n_tokens = tokens.shape[0]
        return self.probe.finish_tree(tokens, parents)

    def observe(self, tree: DraftTree, out: GraphOutput, path: list[int]) -> None:
        self.probe.observe(tree, self._n_tokens, out, path)

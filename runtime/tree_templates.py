"""Precomputed tree-attention templates: the fixed tree shapes a bundle supports, laid out once.

ESP's static trees have a shape that depends only on (k mask slots, per-depth widths), so their block-local
attention rows and position offsets can be computed at export time and shipped in the bundle
(manifest `extras["tree_templates"]`). A runtime (this one, or a device port without any tree logic)
then only widens the "attend to cache" columns and shifts positions by n_past each step.

One template per (decode width, k in 1..3): the default static ESP tree that fills the width, e.g. width 16,
k = 1: root + 7 depth-1 nodes + one mask after each -> 16 slots. JSON form (Android reads it as is):
    {"name": "esp_w16_k1", "width": 16, "masks": 1, "widths": [7],
     "parents": [...], "depth": [...], "visible": ["1000...", ...]}   # visible[i][j] == "1": i attends j
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .tree import tree_layout
from .tree_build import MAX_MASK_SLOTS, attach_mask_slots, default_static_widths, static_tree_parents

TEMPLATES_KEY = "tree_templates"


@dataclass(frozen=True)
class TreeTemplate:
    name: str
    width: int  # slots of the graph the template fills (the tree may leave padding)
    masks: int
    widths: tuple[int, ...]
    parents: tuple[int, ...]  # the whole block: token nodes, then k mask slots per token node
    depth: tuple[int, ...]  # position offset of each slot from n_past
    visible: tuple[str, ...]  # block-local attention rows, "1" = attends

    def visible_matrix(self) -> np.ndarray:
        return np.array([[c == "1" for c in row] for row in self.visible], dtype=bool).reshape(len(self.parents), -1)

    def to_json(self) -> dict:
        return {"name": self.name, "width": self.width, "masks": self.masks, "widths": list(self.widths),
                "parents": list(self.parents), "depth": list(self.depth), "visible": list(self.visible)}

    @classmethod
    def from_json(cls, data: dict) -> TreeTemplate:
        return cls(name=str(data["name"]), width=int(data["width"]), masks=int(data["masks"]),
                   widths=tuple(int(w) for w in data["widths"]), parents=tuple(int(p) for p in data["parents"]),
                   depth=tuple(int(d) for d in data["depth"]), visible=tuple(str(r) for r in data["visible"]))


def make_template(width: int, masks: int, widths: Sequence[int]) -> TreeTemplate:
    token_parents = static_tree_parents(widths)
    tree = attach_mask_slots(np.zeros(token_parents.shape[0], dtype=np.int64), token_parents, masks)
    if len(tree) > width:
        raise ValueError(f"a static tree {list(widths)} with {masks} mask slot(s) needs {len(tree)} slots > {width}")
    layout = tree_layout(tree.parents)
    rows = tuple("".join("1" if v else "0" for v in row) for row in layout.visible)
    return TreeTemplate(name=f"esp_w{width}_k{masks}", width=width, masks=masks, widths=tuple(int(w) for w in widths),
                        parents=tuple(int(p) for p in tree.parents), depth=tuple(int(d) for d in layout.depth),
                        visible=rows)


def default_templates(decode_widths: Sequence[int]) -> list[TreeTemplate]:
    """The default static ESP tree for every decode width and k = 1..3 that leaves room for a draft."""
    templates = []
    for width in decode_widths:
        for masks in range(1, MAX_MASK_SLOTS + 1):
            widths = default_static_widths(width // (masks + 1), masks)
            if widths:
                templates.append(make_template(width, masks, widths))
    return templates


def templates_from_extras(extras: dict) -> list[TreeTemplate]:
    return [TreeTemplate.from_json(t) for t in extras.get(TEMPLATES_KEY, [])]


def check_template(template: TreeTemplate) -> str | None:
    """None if the template's stored rows and offsets are those of its parents array, else what differs."""
    layout = tree_layout(np.asarray(template.parents, dtype=np.int64))
    if len(template.visible) != len(template.parents) or any(len(r) != len(template.parents)
                                                              for r in template.visible):
        return f"template {template.name}: visible rows do not form a {len(template.parents)}-square"
    if not np.array_equal(template.visible_matrix(), layout.visible):
        return f"template {template.name}: attention rows differ from its parents array"
    if tuple(int(d) for d in layout.depth) != template.depth:
        return f"template {template.name}: position offsets differ from its parents array"
    return None

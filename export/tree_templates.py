"""Export hook: write the precomputed tree-attention templates of every decode width into the manifest.

The templates are pure functions of (width, k, per-depth widths), computed by the runtime's own
`default_templates`, so the runtime and the bundle cannot disagree on a layout; the runtime still checks
each template at load (a bundle edited by hand is refused).
"""

from __future__ import annotations

from collections.abc import Sequence

from mtpedge.runtime.tree_templates import TEMPLATES_KEY, default_templates


def tree_template_extras(decode_widths: Sequence[int]) -> dict:
    """The manifest `extras` entry holding the templates (JSON-ready)."""
    return {TEMPLATES_KEY: [t.to_json() for t in default_templates(decode_widths)]}

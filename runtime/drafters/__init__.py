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

from ..cost_table import decode_widths
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
    """The drafter a bundle decodes with when none is named: DEFAULT_DRAFTER where drafting is token-identical
    to plain decoding, plain decoding elsewhere.

    Drafting is token-identical where a wide call computes its root row bit for bit as the width-1 call does:
    the verifier reads only a block's leading chain, whose later rows then follow bit for bit too (their keys
    sit where plain decoding reads them, runtime/contract.py). That holds for float32 graphs and for MatMulNBits
    graphs whose 4-bit MatMuls all take int8 activations (accuracy level 4: the fast bundle,
    tests/test_fast_default.py), with onnxruntime's fused CPU operators or without (tests/test_fused_ops.py,
    tests/test_row_probe.py), on CPUs whose MLAS kernels quantize and sum each row alike for any row count
    (AVX-512 VNNI; on an AVX2-only CPU 4-bit products with 32-input blocks take a one-row kernel of their own).
    This function reads the recipe; the commands then probe the bundle on the machine (runtime/row_probe.py) and
    decode plainly where rows differ.
    It does not hold for
    - 4-bit MatMuls with float activations (level 0): MLAS has a one-row kernel that sums in another order than
      its dequantize + SGEMM path for wider calls (benchmarks/results/fast/README.md, section 8);
    - QDQ a16w8 graphs (extras "qdq") with decode graphs of several widths: on the CPU's QDQ emulation the root
      row differs by up to 0.67, argmax flipped at 3 of 40 steps (benchmarks/results/quant/
      smollm2-width-invariance-cpu-qdq.log: the recipe's fp16 nodes), and compiled for the HTP (extras "qnn",
      which keep "qdq") by 0.055 and 0.11 on the simulator at the two steps measured
      (smollm2-width-invariance-htp.log).
    A QDQ bundle with ONE decode graph (one width, one context: what `mtpedge export --precision qdq` and
    `--target qnn` write by default) drafts by default: plain decoding then runs the very graph the drafts run,
    and a row's result depends on its inputs, not on its slot or on the other slots (the probe compares them;
    benchmarks/results/quant/smollm2.md, "One decode width")."""
    extras = manifest.extras or {}
    if extras.get("qdq"):
        return DEFAULT_DRAFTER if single_decode_graph(manifest) else NONE
    config = (extras.get("quantization") or {}).get("config")
    if config is not None and not _rows_width_invariant(config):
        return NONE
    return DEFAULT_DRAFTER


def single_decode_graph(manifest) -> bool:
    """Whether every decode step runs one graph (one decode width, no context buckets): then plain decoding and
    a drafted block share its arithmetic, whatever a backend does differently at another width."""
    return len({(g.width, g.context) for g in manifest.graphs if g.kind == "decode"}) == 1


def _rows_width_invariant(config: dict) -> bool:
    """A quantized bundle's recipe (export.quant_config.QuantConfig as a dict) keeps rows width-invariant."""
    four_bit = config.get("weights") in ("gguf", "int4") or config.get("output_layer") == "int4"
    int8_activations = not four_bit or (config.get("accuracy_level") == 4 and not config.get("float_activation_roles"))
    return int8_activations


__all__ = ["DEFAULT_DRAFTER", "DRAFTERS", "NONE", "Drafter", "DrafterSpec", "check_fits", "default_drafter",
           "describe_drafters", "drafter_names", "make_drafter", "parse_drafter", "single_decode_graph", "split_specs"]


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
    check_fits(spec, decode_widths(engine.manifest))
    cls = DRAFTERS[spec.name]
    return cls(engine, cls.Options(**spec.kwargs))

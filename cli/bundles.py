"""Where bundles live when the user names none: a cache folder per (model, context, precision), exported on
first use.

    precision "auto"     a GGUF source (the embedded default model is one) gets the fast bundle: the file's own
                         4/8-bit grid in MatMulNBits kernels (export.quant_config.FAST); a Hugging Face
                         folder gets float32 (no grid to keep)
    precision "float32"  the traced float32 graphs (parity work, the quality reference)
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict
from pathlib import Path

from mtpedge.runtime.bundle import BUNDLE_VERSION, MANIFEST, BundleError, bundle_file, files_sha256, read_manifest
from mtpedge.runtime.cache import cache_root
from mtpedge.runtime.cost_table import decode_widths
from mtpedge.runtime.kernels import NATIVE_LABEL, RECIPE_VERSION, native_kernels_pay

PRECISIONS = ("auto", "float32")
# the fast bundle's smaller context buckets (those below its context): a conversation that fits 256 or 512
# positions runs graphs that read only that much cache (plain decoding 1.15-1.2x, benchmarks/results/fast)
FAST_BUCKETS = (256, 512)
# the fast bundle's decode widths: on its int8-activation kernels a width-16 call costs ~3.5x a width-1 call, a width-4
# call ~1.4x and a width-2 call ~1.1x, so cost-aware trees need narrow graphs between them. Width 2 (one draft for
# 1.1x) took cost-aware lookup from 1.23x to 1.38x plain decoding on 13 tuning questions; widths 3 and 8 on top
# added nothing (1.46x against 1.47x). benchmarks/results/fast/README.md section 24
FAST_DECODE_WIDTHS = (1, 2, 4, 16)
# a QDQ / QNN bundle's one decode graph: plain decoding runs the graph the drafts run, so drafting stays lossless
# on the HTP, whose graphs of two widths compute a row differently (runtime.drafters.default_drafter). 16: on 13
# tuning questions with every width costing alike (an NPU's case), lookup's τ was 1.28 / 1.33 / 1.38 and the
# hybrid's 1.33 / 1.58 / 1.76 at widths 4 / 8 / 16 (benchmarks/results/quant/smollm2.md, "One decode width")
NPU_DECODE_WIDTHS = (16,)

# the cache label of the fast bundle; equal to export.quant_config.FAST.label (tested), written here so that
# a runtime-only install finds a cached fast bundle without importing the export side
FAST_LABEL = "gguf-a4-down16-lm16-fused"


def fast_label() -> str:
    """The fast bundle's label on this machine: FAST_LABEL, + NATIVE_LABEL where mtpedge's kernels pay
    (export.quant_config.fast_recipe)."""
    return FAST_LABEL + (NATIVE_LABEL if native_kernels_pay() else "")
DMTD_DRAFTERS = ("dmtd-spec", "dmtd")  # drafters that run on a DMTD bundle (runtime/drafters/dmtd.py)


def fast_buckets(context: int, widest: int = 64) -> tuple[int, ...]:
    """The buckets a fast bundle of `context` positions gets (those between its widest graph and its context)."""
    return tuple(b for b in FAST_BUCKETS if widest <= b < context)


def default_bundle_dir(model: str | None, context: int, precision: str | None = None) -> Path:
    """The cache folder of a model's bundle; `precision` labels a quantized one (None = float32)."""
    if model is None:
        name = "SmolLM2-135M-Instruct"
    else:
        path = Path(model).resolve()
        name = f"{path.stem}-{hashlib.sha1(str(path).encode()).hexdigest()[:8]}"
    suffix = f"-{precision}" if precision else ""
    return cache_root() / "bundles" / f"{name}-cl{context}{suffix}"


def is_fast(model: str | None, precision: str) -> bool:
    """Whether `precision` means the fast (GGUF-grid) bundle for `model` (None = the embedded default, a GGUF)."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision {precision!r} is unknown: choose one of {', '.join(PRECISIONS)}")
    return precision == "auto" and (model is None or str(model).endswith(".gguf"))


def ensure_bundle(bundle: str | None, model: str | None, context: int, say=print, mtp: bool = False,
                  dmtd: bool = False, precision: str = "auto") -> Path:
    """The bundle to run: the one named, or the cached export of `model` (None = embedded default) at
    `precision` (see the module's docstring).

    mtp: the default model's bundle with the shipped multi-token adapter, in a cache folder of its own since
    adapter graphs make plain decoding slower: `-mtp-<fast label>` on the fast recipe (the LoRA factors stay
    float32 beside MatMulNBits base weights), `-mtp` at precision float32.
    dmtd: the default model's DMTD bundle with the shipped DMTD model (tapped base graphs + the trained copy's
    graphs): `-dmtd-<fast label>` on the fast recipe (dmtd_export_config), `-dmtd` at precision float32."""
    if bundle:
        return Path(bundle)
    _refuse_unshipped(model, mtp, dmtd)
    fast = is_fast(model, precision)
    flavor = fast_label() if fast else None
    if mtp or dmtd:
        family = "mtp" if mtp else "dmtd"
        flavor = f"{family}-{flavor}" if flavor else family
    folder = default_bundle_dir(model, context, flavor)
    cached = (folder / MANIFEST).is_file()
    reexport = _why_reexport(folder, model, mtp, dmtd, fast) if cached else None
    if cached and reexport is None:
        return folder
    try:
        from mtpedge.export.bundle_writer import ExportConfig, export_bundle
    except ImportError as err:
        if cached:  # a runtime-only install keeps the older bundle rather than failing
            return folder
        raise SystemExit(
            f"no bundle at {folder}, and exporting one needs the export extras ({err.name} is missing): "
            "`pip install 'mtpedge[export]'`, or pass --bundle DIR"
        ) from err
    if cached:  # the atomic export replaces it only once the new one is complete
        say(f"the cached bundle {folder} {reexport}: re-exporting it")
    what = "the default model" if model is None else model
    extra = " with its shipped multi-token adapter" if mtp else " with its shipped DMTD model" if dmtd else ""
    extra += " on its GGUF grid (fast kernels)" if fast else ""
    say(f"exporting {what}{extra} to {folder} (once; later runs reuse it)")
    if dmtd:
        from mtpedge.export.dmtd_bundle import export_dmtd_bundle
        from mtpedge.models.loading import load_model

        export_dmtd_bundle(load_model(None), "default", folder, dmtd_export_config(context, fast), progress=say)
        return folder
    export_bundle(model, folder, ExportConfig(context=context, mtp_adapter="default" if mtp else None,
                                              **(_fast_export_fields(context) if fast else {})),
                  progress=say)
    return folder


def _fast_export_fields(context: int) -> dict:
    """What makes an export of `context` positions the fast bundle, as fields of ExportConfig and DmtdExportConfig
    alike: the recipe, the context buckets and the decode widths."""
    from mtpedge.export.quant_config import fast_recipe

    return {"quantization": fast_recipe(), "context_buckets": fast_buckets(context),
            "decode_widths": FAST_DECODE_WIDTHS}


def dmtd_export_config(context: int, fast: bool, copy_widths: tuple[int, ...] | None = None):
    """How a DMTD bundle is exported: float32, or on the fast recipe (the base graphs as the fast bundle's, the
    copy's on round-to-nearest blocks: export/dmtd_bundle.py), where dmtd-spec ran 4.6x the tokens per second of
    the float32 bundle on 13 tuning questions (benchmarks/results/dmtd/README.md, twenty-fifth session).
    copy_widths: the copy's graphs besides the prefill width (None: 1 and 4, and on the fast recipe also 2, the
    width of a draft_len-1 step's heads)."""
    from mtpedge.export.dmtd_bundle import DmtdExportConfig

    if not fast:
        return DmtdExportConfig(context=context, **({"copy_widths": copy_widths} if copy_widths else {}))
    return DmtdExportConfig(context=context, copy_widths=copy_widths or (1, 2, 4), **_fast_export_fields(context))


def _refuse_unshipped(model: str | None, mtp: bool, dmtd: bool) -> None:
    """The trained drafters' cached bundles exist for the default model only: say how to make one otherwise."""
    if mtp and dmtd:
        raise SystemExit("mtp and the dmtd drafters run on different bundles: name one family per run, or pass "
                         "--bundle DIR")
    if mtp and model is not None:
        raise SystemExit("the mtp drafter needs a bundle exported with your model's adapter: `mtpedge train-mtp`, "
                         "then `mtpedge export MODEL --mtp-adapter ADAPTER.pt --out DIR`, then --bundle DIR")
    if dmtd and model is not None:
        raise SystemExit("the dmtd drafters need a DMTD bundle of your model: `mtpedge train-dmtd MODEL --data DIR "
                         "--out CKPT --export-bundle DIR`, then --bundle DIR")


def _why_reexport(folder: Path, model: str | None, mtp: bool, dmtd: bool, fast: bool) -> str | None:
    """Why a cached bundle must be exported again (None: it is current)."""
    if _other_version(folder):
        return "was exported by another version of mtpedge (its graphs take other inputs)"
    if mtp and _predates_shipped_adapter(folder):
        return "predates the multi-token adapter shipped for the default model"
    if dmtd and _predates_shipped_dmtd(folder):
        return "predates the DMTD model shipped for the default model"
    if dmtd and fast and _copy_recipe_differs(folder):
        return "holds the DMTD copy's graphs at another precision than this mtpedge exports"
    if model is None and not mtp and not dmtd and _lacks_shipped_masks(folder):
        return "predates the learned masks shipped for the default model"
    if model is None and _predates_shipped_table(folder):
        return "holds another static n-gram table than the one shipped for the default model (or none)"
    if fast and _recipe_differs(folder):
        return ("was made by another fast recipe than this mtpedge's (its manifest's quantization config or kernels "
                "recipe differs)")
    if fast and (widths := _other_decode_widths(folder)):
        return (f"has decode widths {widths}, not this mtpedge's {FAST_DECODE_WIDTHS} (the narrow calls the "
                "cost-aware trees size to)")
    return None


def _other_decode_widths(folder: Path) -> tuple[int, ...] | None:
    """A cached fast bundle's decode widths where they are not FAST_DECODE_WIDTHS (None: they are). A runtime-only
    install cannot re-export: ensure_bundle then keeps the cached bundle."""
    widths = tuple(decode_widths(read_manifest(folder)))
    return None if widths == FAST_DECODE_WIDTHS else widths


def _other_version(folder: Path) -> bool:
    """A cached bundle whose manifest states another bundle version than this mtpedge reads (or none)."""
    try:
        return json.loads((folder / MANIFEST).read_text()).get("version") != BUNDLE_VERSION
    except (OSError, ValueError, AttributeError):
        return True


def _recipe_differs(folder: Path) -> bool:
    """A cached fast bundle whose recorded quantization config (manifest extras) is not this mtpedge's fast recipe
    (export.quant_config.fast_recipe): recipes that differ in operators or graph layout share the folder's label. A
    runtime-only install cannot re-export: ensure_bundle then keeps the cached bundle."""
    from mtpedge.export.quant_config import fast_recipe

    quantization = read_manifest(folder).extras.get("quantization") or {}
    recipe = fast_recipe()
    if recipe.kernels == "mtpedge" and quantization.get("kernels_recipe") != RECIPE_VERSION:
        return True  # made on an older recipe of mtpedge's kernels (runtime.kernels.RECIPE_VERSION)
    return quantization.get("config") != json.loads(json.dumps(asdict(recipe)))


def _copy_recipe_differs(folder: Path) -> bool:
    """A cached fast DMTD bundle whose copy graphs are not at export.quant_config.copy_quantization's label (a
    runtime-only install cannot re-export: ensure_bundle then keeps the bundle)."""
    from mtpedge.export.quant_config import copy_quantization, fast_recipe

    entries = (read_manifest(folder).extras.get("dmtd") or {}).get("draft_graphs") or [{}]
    return entries[0].get("precision") != copy_quantization(fast_recipe()).label


def _predates_shipped_dmtd(folder: Path) -> bool:
    """A -dmtd bundle exported from another DMTD model than the one this installation ships."""
    from mtpedge.export.shipped import DEFAULT_DMTD

    if not DEFAULT_DMTD.is_file():
        return False
    recorded = (read_manifest(folder).extras.get("dmtd") or {}).get("checkpoint_sha256")
    return recorded != files_sha256([DEFAULT_DMTD])


def _predates_shipped_adapter(folder: Path) -> bool:
    """A -mtp bundle exported from another multi-token adapter than the one this installation ships (or before
    bundles recorded which)."""
    from mtpedge.export.shipped import DEFAULT_ADAPTER

    if not DEFAULT_ADAPTER.is_file():
        return False
    recorded = (read_manifest(folder).extras.get("mtp") or {}).get("checkpoint_sha256")
    return recorded != files_sha256([DEFAULT_ADAPTER])


def _predates_shipped_table(folder: Path) -> bool:
    """A default-model bundle whose copy of the static n-gram table (runtime/static_ngrams.py) is not the one this
    installation ships for its tokenizer, or that has no copy where one ships: `lookup` reads the bundle's copy
    (the Android engine only that), so an upgraded table reaches a cached bundle only by export."""
    from mtpedge.runtime.static_ngrams import EXTRAS_KEY, SHIPPED_DIR, StaticNgrams, shipped_file

    shipped = {files_sha256([path]) for path in SHIPPED_DIR.glob("*-ngrams.npz")}
    manifest = read_manifest(folder)
    if copy := manifest.extras.get(EXTRAS_KEY):
        try:
            if manifest.files[copy]["sha256"] in shipped:  # recorded by the export
                return False
            path = bundle_file(folder, copy)
            return shipped_file(StaticNgrams.load(path).vocab) is not None
        except (OSError, KeyError, ValueError, BundleError):  # a missing or damaged copy (or StaticNgramsError)
            return True
    if not shipped:
        return False
    from mtpedge.runtime.tokenizer import TextTokenizer

    try:
        fingerprint = TextTokenizer(folder, manifest.tokenizer).fingerprint
    except BundleError:  # an unreadable tokenizer: loading the bundle names it
        return False
    return shipped_file(fingerprint) is not None


def _lacks_shipped_masks(folder: Path) -> bool:
    """A default-model bundle exported before the project shipped learned masks for those very weights.

    The weights are compared (SHA-256) so that a default model the shipped masks were not trained for, which
    the export would not give them to anyway, is not re-exported on every run.
    """
    from mtpedge.export.learned_masks import default_masks_path, load_masks_file

    shipped = default_masks_path()
    if shipped is None:
        return False
    manifest = read_manifest(folder)
    if (manifest.extras.get("mtp") or {}).get("masks_file"):
        return False
    return load_masks_file(shipped).source_sha256 == manifest.source_sha256


COST_MODEL_HELP = ("what a graph call of each width costs, which drafters that size their trees (lookup, hybrid) "
                   "read: measured (default: measured once per bundle and machine, cached under the mtpedge cache), "
                   "remeasure (measure again and cache), flat (every width the same: trees fill their width, the "
                   "NPU assumption), or a cost-table file (JSON, e.g. from an on-device profile)")


def attach_cost_table(engine, option: str, say=print) -> None:
    """Give `engine` the cost table `--cost-model` asks for (a bad file or cache is named, and measured instead)."""
    from mtpedge.runtime.cost_measure import cost_table_from_option

    engine.cost_table = cost_table_from_option(engine, option, cache_root() / "costs", say=say)

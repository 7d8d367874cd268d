"""The bundle: one folder holding everything the runtime needs, described by `manifest.json`.

    manifest.json      format + version, model config, rope, tokens, chat template, graphs, provenance
    tokenizer.json     a Hugging Face `tokenizers` file
    embeddings.npy     the input embedding table (vocab, hidden) float32, looked up on the host
    weights.data       the graphs' shared external weights
    <graph>.onnx       one static graph per width

The runtime refuses a bundle it cannot run, saying what is wrong and what to do.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .contract import GraphShape
from .model_config import DecoderConfig


def files_sha256(paths: list[Path]) -> str:
    """SHA-256 over the files' bytes in sorted path order: the manifest's source_sha256."""
    digest = hashlib.sha256()
    for path in sorted(paths):
        with open(path, "rb") as handle:
            for chunk in iter(lambda: handle.read(1 << 20), b""):
                digest.update(chunk)
    return digest.hexdigest()


BUNDLE_FORMAT = "mtpedge-bundle"
BUNDLE_VERSION = 1
MANIFEST = "manifest.json"


class BundleError(RuntimeError):
    """A bundle the runtime cannot use; the message names the problem and the fix."""


@dataclass(frozen=True)
class GraphEntry:
    name: str
    file: str
    kind: str  # prefill | decode
    width: int
    context: int
    precision: str = "float32"
    inputs: dict[str, list[int]] = field(default_factory=dict)
    outputs: dict[str, list[int]] = field(default_factory=dict)


@dataclass(frozen=True)
class TokenizerInfo:
    file: str
    bos_token_id: int | None
    eos_token_ids: list[int]
    chat_template: str | None
    add_bos_token: bool = False
    bos_token: str | None = None
    eos_token: str | None = None


@dataclass(frozen=True)
class Manifest:
    model_name: str
    config: DecoderConfig
    context: int
    tokenizer: TokenizerInfo
    embeddings_file: str
    graphs: list[GraphEntry]
    mask_value: float
    source_sha256: str
    producer: dict[str, str]
    extras: dict[str, Any] = field(default_factory=dict)  # later features (mask settings, templates, ...)
    format: str = BUNDLE_FORMAT
    version: int = BUNDLE_VERSION

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Manifest:
        values = dict(data)
        values["config"] = DecoderConfig.from_dict(values["config"])
        values["tokenizer"] = TokenizerInfo(**values["tokenizer"])
        values["graphs"] = [GraphEntry(**g) for g in values["graphs"]]
        return cls(**values)

    def graph_shape(self, width: int, context: int | None = None) -> GraphShape:
        c = self.config
        adapter = bool(self.extras.get("mtp", {}).get("adapter_graphs", False))
        return GraphShape(width, context or self.context, c.hidden_size, c.head_dim, c.num_kv_heads, c.num_layers,
                          c.vocab_size, adapter)

    @property
    def context_buckets(self) -> list[int]:
        """The contexts the graphs come in, ascending; the last is the bundle's context (see kv_cache)."""
        return sorted({g.context for g in self.graphs})


def read_manifest(folder: str | Path) -> Manifest:
    """Read and check a bundle's manifest; every refusal says what to do."""
    folder = Path(folder)
    path = folder / MANIFEST
    if not folder.is_dir():
        raise BundleError(f"bundle folder {folder} does not exist: create one with `mtpedge export`")
    if not path.is_file():
        raise BundleError(f"{folder} has no {MANIFEST}: it is not an mtpedge bundle (or its export was interrupted); "
                          "re-run `mtpedge export`")
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise BundleError(f"{path} is not valid JSON ({err}): re-run `mtpedge export`") from err
    if data.get("format") != BUNDLE_FORMAT:
        raise BundleError(f"{path} is not an mtpedge bundle manifest (format {data.get('format')!r})")
    if data.get("version") != BUNDLE_VERSION:
        raise BundleError(
            f"bundle version {data.get('version')} but this mtpedge reads version {BUNDLE_VERSION}: "
            "re-export the model with this mtpedge (`mtpedge export`)"
        )
    try:
        manifest = Manifest.from_dict(data)
    except (KeyError, TypeError, ValueError) as err:
        raise BundleError(f"{path} is malformed ({err}): re-run `mtpedge export`") from err
    _check_consistency(folder, manifest)
    return manifest


def _check_consistency(folder: Path, manifest: Manifest) -> None:
    files = [manifest.tokenizer.file, manifest.embeddings_file] + [g.file for g in manifest.graphs]
    missing = [f for f in files if not (folder / f).is_file()]
    if missing:
        raise BundleError(f"bundle {folder} lacks {missing}: it is incomplete; re-run `mtpedge export`")
    if not manifest.graphs:
        raise BundleError(f"bundle {folder} lists no graphs; re-run `mtpedge export`")
    full = {(g.kind, g.width) for g in manifest.graphs if g.context == manifest.context}
    for graph in manifest.graphs:
        if graph.context > manifest.context or (graph.context < manifest.context
                                                 and (graph.kind, graph.width) not in full):
            raise BundleError(f"graph {graph.name} has context {graph.context}, the bundle {manifest.context} (a "
                              "smaller context bucket needs a full-context graph of the same kind and width); "
                              "re-run `mtpedge export`")
        expected = manifest.graph_shape(graph.width, graph.context)
        if graph.inputs != expected.input_shapes() or graph.outputs != expected.output_shapes():
            raise BundleError(
                f"graph {graph.name}: its I/O shapes in the manifest do not match the model config "
                "(a bundle edited by hand or from another mtpedge); re-run `mtpedge export`"
            )
    if not any(g.kind == "decode" for g in manifest.graphs):
        raise BundleError(f"bundle {folder} has no decode graph; re-run `mtpedge export`")

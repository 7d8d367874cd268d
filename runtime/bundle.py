"""The bundle: one folder holding everything the runtime needs, described by `manifest.json`.

    manifest.json      format + version, model config, rope, tokens, chat template, graphs, provenance
    tokenizer.json     a Hugging Face `tokenizers` file
    embeddings.npy     the input embedding table (vocab, hidden) float32, looked up on the host
    weights.data       the graphs' shared external weights
    <graph>.onnx       one static graph per width

The runtime refuses a bundle it cannot run, saying what is wrong and what to do. The manifest records each
file's size and SHA-256 (`files`): loading checks the sizes (a stat per file), `mtpedge verify` the hashes.
Bundles exported before the hashes were recorded have no `files`: they still load, and verify says it has
nothing to check them against. Every file a manifest names must lie inside the bundle folder (no absolute
path, no `..`, no symlink that leads out), so a manifest cannot make the runtime read files elsewhere.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path, PurePosixPath
from typing import Any

from .contract import LAYER_HIDDEN, GraphShape
from .model_config import DecoderConfig
from .static_ngrams import EXTRAS_KEY as STATIC_NGRAMS


def files_sha256(paths: list[Path]) -> str:
    """SHA-256 over the files' bytes in sorted path order: the manifest's source_sha256."""
    digest = hashlib.sha256()
    for path in sorted(paths):
        with open(path, "rb") as handle:
            for chunk in iter(lambda: handle.read(1 << 20), b""):
                digest.update(chunk)
    return digest.hexdigest()


BUNDLE_FORMAT = "mtpedge-bundle"
BUNDLE_VERSION = 2  # 2: the graph contract places the block's K/V at cache columns (cache_slots)
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
    # every file of the bundle but the manifest: relative path -> {"bytes": size, "sha256": hex digest};
    # empty in bundles exported before it was recorded (see the module docstring)
    files: dict[str, dict[str, Any]] = field(default_factory=dict)
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
                          c.vocab_size, adapter, int(self.extras.get(LAYER_HIDDEN, 0)))

    @property
    def context_buckets(self) -> list[int]:
        """The contexts the graphs come in, ascending; the last is the bundle's context (see kv_cache)."""
        return sorted({g.context for g in self.graphs})


def read_manifest(folder: str | Path, check_sizes: bool = True) -> Manifest:
    """Read and check a bundle's manifest; every refusal says what to do.

    check_sizes=False skips comparing the files' sizes with the manifest's record (`mtpedge verify` lists
    every difference itself)."""
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
    _check_locations(folder, manifest)
    _check_consistency(folder, manifest)
    if check_sizes:
        _check_sizes(folder, manifest)
    return manifest


def bundle_file(folder: Path, name: str) -> Path:
    """The path of a file a manifest names, refused if the name leads out of the bundle folder."""
    if not isinstance(name, str) or not name or "\\" in name or PurePosixPath(name).is_absolute() \
            or ".." in PurePosixPath(name).parts:
        raise BundleError(f"the manifest of {folder} names the file {name!r}, which is not a plain name inside "
                          "the bundle: a bundle's files stay in its folder; re-run `mtpedge export`")
    path = folder / name
    if not path.resolve().is_relative_to(folder.resolve()):
        raise BundleError(f"{path} leads out of the bundle folder (to {path.resolve()}): a bundle's files stay "
                          "in its folder; re-run `mtpedge export`")
    return path


def _extras_files(extras: dict[str, Any]) -> list[str]:
    """The files the extras name: shared graph weights, the static n-gram table, the adapter's, DMTD's parts, QNN
    context binaries.
    (Other strings there, such as a training run's data path, are provenance, not bundle files.)"""
    try:
        mtp, dmtd, qnn = (extras.get(key) or {} for key in ("mtp", "dmtd", "qnn"))
        names = [extras.get("weights_file"), extras.get(STATIC_NGRAMS), mtp.get("masks_file"),
                 mtp.get("sampler_file"), mtp.get("unembedding"),
                 *(part.get("file") for part in dmtd.get("parts", [])), *qnn.get("context_binaries", [])]
    except (AttributeError, TypeError) as err:
        raise BundleError(f"the manifest's extras are malformed ({err}): re-run `mtpedge export`") from err
    return [name for name in names if name is not None and name != "embeddings"]


def _check_locations(folder: Path, manifest: Manifest) -> None:
    """Every named file inside the folder, and no symlink in the folder that leads out of it."""
    names = [manifest.tokenizer.file, manifest.embeddings_file, *(g.file for g in manifest.graphs),
             *manifest.files, *_extras_files(manifest.extras)]
    for name in names:
        bundle_file(folder, name)
    root = folder.resolve()
    for where, dirs, files in os.walk(folder):
        for entry in dirs + files:
            path = Path(where) / entry
            if path.is_symlink() and not path.resolve().is_relative_to(root):
                raise BundleError(f"{path} is a symlink out of the bundle (to {path.resolve()}): a bundle's files "
                                  "stay in its folder; copy the file in, or re-run `mtpedge export`")


def _check_sizes(folder: Path, manifest: Manifest) -> None:
    for name, record in manifest.files.items():
        path = folder / name
        size = path.stat().st_size if path.is_file() else None
        if size != record["bytes"]:
            found = "is missing" if size is None else f"has {size} bytes"
            raise BundleError(f"{path} {found}, but its export wrote {record['bytes']}: the bundle is damaged or "
                              f"incomplete; `mtpedge verify {folder}` checks every file; re-run `mtpedge export`")


def file_record(path: Path) -> dict[str, Any]:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return {"bytes": path.stat().st_size, "sha256": digest.hexdigest()}


def bundle_contents(folder: Path) -> list[str]:
    """Every file under the folder but the manifest, as relative POSIX paths, sorted."""
    found = (Path(where, name).relative_to(folder).as_posix() for where, _, names in os.walk(folder) for name in names)
    return sorted(name for name in found if name != MANIFEST)


def write_manifest(folder: Path, manifest: Manifest) -> Manifest:
    """Record every file's size and SHA-256 in the manifest and write it: the last step of any bundle writer."""
    sealed = replace(manifest, files={name: file_record(folder / name) for name in bundle_contents(folder)})
    (folder / MANIFEST).write_text(sealed.to_json())
    return sealed


@dataclass(frozen=True)
class FileCheck:
    name: str
    status: str  # ok | changed | size | missing | unlisted (a file the export did not write: not checked)
    detail: str = ""


def verify_files(folder: Path, manifest: Manifest) -> list[FileCheck]:
    """Every file of the manifest's record hashed and compared; files the record lacks listed as unlisted."""
    checks = []
    for name, record in sorted(manifest.files.items()):
        path = folder / name
        if not path.is_file():
            checks.append(FileCheck(name, "missing"))
            continue
        size = path.stat().st_size
        if size != record["bytes"]:
            checks.append(FileCheck(name, "size", f"{size} bytes, the export wrote {record['bytes']}"))
        elif file_record(path)["sha256"] != record["sha256"]:
            checks.append(FileCheck(name, "changed", "same size, different SHA-256"))
        else:
            checks.append(FileCheck(name, "ok", f"{size} bytes"))
    checks += [FileCheck(name, "unlisted") for name in bundle_contents(folder) if name not in manifest.files]
    return checks


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
        outputs_fit = graph.outputs in (expected.output_shapes(), replace(expected, present=False).output_shapes())
        if graph.inputs != expected.input_shapes() or not outputs_fit:
            raise BundleError(
                f"graph {graph.name}: its I/O shapes in the manifest do not match the model config "
                "(a bundle edited by hand or from another mtpedge); re-run `mtpedge export`"
            )
    if not any(g.kind == "decode" for g in manifest.graphs):
        raise BundleError(f"bundle {folder} has no decode graph; re-run `mtpedge export`")

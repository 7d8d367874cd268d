"""A GGUF file's metadata and tensor table, read in one pass and checked against the file's size.

Why not gguf's `GGUFReader`: it builds a numpy view per metadata element, ~440k of them for SmolLM2's
49,152-token vocabulary and 48,900 merges, and transformers runs it three times per load (once each for the
config, the weights and the tokenizer): 18.5 of a 43 s load in the tenth session's profile. Here the metadata
is decoded with `struct` from one read of the header, and a tensor's data is a slice of a memory map.

Every count and offset is checked against the bytes that are there, so a damaged or hostile file fails with
a `GGUFError` that names the field, before anything large is allocated.
"""

from __future__ import annotations

import math
import mmap
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

MAGIC = b"GGUF"
SUPPORTED_VERSIONS = (2, 3)
DEFAULT_ALIGNMENT = 32
MAX_DIMS = 4
MAX_ARRAY_DEPTH = 2  # arrays of arrays appear in some files; deeper nesting is a damaged file

# value type id -> struct format of one scalar (little-endian)
_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9


class GGUFError(ValueError):
    """A GGUF file that cannot be read; the message names the field and the byte offset."""


@dataclass(frozen=True)
class TensorInfo:
    name: str
    shape: tuple[int, ...]  # numpy order: (rows, columns) for a matrix; GGUF stores the reverse
    qtype: GGMLQuantizationType
    offset: int  # absolute byte offset in the file
    nbytes: int


class _Cursor:
    """Reads little-endian fields from the file's bytes, refusing to run past their end."""

    def __init__(self, data: mmap.mmap | bytes, path: Path) -> None:
        self.data, self.pos, self.path = data, 0, path

    def take(self, n: int, what: str) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise GGUFError(f"{self.path}: {what} at byte {self.pos} needs {n} bytes, the file ends at "
                            f"{len(self.data)}: it is truncated or damaged; download it again")
        out = self.data[self.pos:self.pos + n]
        self.pos += n
        return out

    def scalar(self, fmt: str, what: str) -> Any:
        return struct.unpack(fmt, self.take(struct.calcsize(fmt), what))[0]

    def string(self, what: str) -> str:
        raw = self.take(self.scalar("<Q", what), what)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as err:
            raise GGUFError(f"{self.path}: {what} is not UTF-8 ({err}): the file is damaged") from err

    def count(self, what: str, min_item_bytes: int) -> int:
        n = self.scalar("<Q", what)
        if n * min_item_bytes > len(self.data) - self.pos:
            raise GGUFError(f"{self.path}: {what} claims {n} entries, more than the file's remaining "
                            f"{len(self.data) - self.pos} bytes can hold: the file is truncated or damaged")
        return n

    def value(self, type_id: int, what: str, depth: int = 0) -> Any:
        if type_id in _SCALARS:
            return self.scalar(_SCALARS[type_id], what)
        if type_id == _STRING:
            return self.string(what)
        if type_id == _ARRAY and depth < MAX_ARRAY_DEPTH:
            item_type = self.scalar("<I", what)
            if item_type in _SCALARS:  # one unpack for the whole array: the scores and token types
                fmt = _SCALARS[item_type]
                n = self.count(what, struct.calcsize(fmt))
                return list(struct.unpack(f"<{n}{fmt[1]}", self.take(n * struct.calcsize(fmt), what)))
            n = self.count(what, 8 if item_type == _STRING else 12)
            if item_type == _STRING:
                return [self.string(what) for _ in range(n)]
            return [self.value(item_type, what, depth + 1) for _ in range(n)]
        raise GGUFError(f"{self.path}: {what} has value type {type_id}, which GGUF does not define: the file is "
                        "damaged or of a newer GGUF version")


@dataclass
class GGUFFile:
    """The parsed header of a GGUF file; `raw(name)` maps a tensor's bytes without reading them."""

    path: Path
    version: int
    metadata: dict[str, Any]
    tensors: dict[str, TensorInfo]
    _map: mmap.mmap

    @classmethod
    def open(cls, path: str | Path) -> GGUFFile:
        path = Path(path)
        with open(path, "rb") as f:
            if f.read(4) != MAGIC:
                raise GGUFError(f"{path} does not start with the GGUF magic: the file is damaged or not GGUF")
            mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        cur = _Cursor(mapped, path)
        cur.take(4, "magic")
        version = cur.scalar("<I", "version")
        if version not in SUPPORTED_VERSIONS:
            hint = " (a big-endian file?)" if version > 0xFFFF else ""
            raise GGUFError(f"{path}: GGUF version {version}{hint} is not supported (supported: "
                            f"{SUPPORTED_VERSIONS}); re-convert it with a current llama.cpp")
        n_tensors = cur.count("tensor count", 24)
        n_fields = cur.count("metadata count", 12)
        metadata: dict[str, Any] = {}
        for _ in range(n_fields):
            key = cur.string("metadata key")
            if key in metadata:
                raise GGUFError(f"{path}: metadata key {key!r} appears twice: the file is damaged")
            metadata[key] = cur.value(cur.scalar("<I", key), key)
        infos = [_tensor_info(cur) for _ in range(n_tensors)]
        alignment = metadata.get("general.alignment", DEFAULT_ALIGNMENT)
        if not isinstance(alignment, int) or alignment <= 0 or alignment & (alignment - 1):
            raise GGUFError(f"{path}: general.alignment {alignment!r} is not a power of two: the file is damaged")
        data_start = -(-cur.pos // alignment) * alignment
        tensors: dict[str, TensorInfo] = {}
        for name, shape, qtype, rel_offset in infos:
            if name in tensors:
                raise GGUFError(f"{path}: tensor {name!r} appears twice: the file is damaged")
            block, block_bytes = GGML_QUANT_SIZES[qtype]
            if shape[-1] % block:
                raise GGUFError(f"{path}: tensor {name} has {shape[-1]} columns, not a multiple of "
                                f"{qtype.name}'s block of {block}: the file is damaged")
            nbytes = math.prod(shape) // block * block_bytes
            start = data_start + rel_offset
            if rel_offset % alignment or start + nbytes > len(mapped):
                raise GGUFError(f"{path}: tensor {name}'s data ({nbytes} bytes at {start}) lies outside the file "
                                f"({len(mapped)} bytes) or off its alignment: the file is truncated or damaged")
            tensors[name] = TensorInfo(name, shape, qtype, start, nbytes)
        return cls(path, version, metadata, tensors, mapped)

    def raw(self, name: str) -> np.ndarray:
        """A tensor's bytes as gguf's `dequantize` takes them: (rows..., bytes per row) uint8, or the values
        themselves for float tensors; read-only, backed by the file."""
        info = self.tensors[name]
        flat = np.frombuffer(self._map, dtype=np.uint8, count=info.nbytes, offset=info.offset)
        block, block_bytes = GGML_QUANT_SIZES[info.qtype]
        if info.qtype in _FLOAT_DTYPES:
            return flat.view(_FLOAT_DTYPES[info.qtype]).reshape(info.shape)
        return flat.reshape(*info.shape[:-1], info.shape[-1] // block * block_bytes)


_FLOAT_DTYPES = {GGMLQuantizationType.F32: np.float32, GGMLQuantizationType.F16: np.float16}


def _tensor_info(cur: _Cursor) -> tuple[str, tuple[int, ...], GGMLQuantizationType, int]:
    name = cur.string("tensor name")
    n_dims = cur.scalar("<I", f"tensor {name} rank")
    if not 1 <= n_dims <= MAX_DIMS:
        raise GGUFError(f"{cur.path}: tensor {name} has {n_dims} dimensions (1-{MAX_DIMS} allowed): damaged file")
    dims = [cur.scalar("<Q", f"tensor {name} shape") for _ in range(n_dims)]
    type_id = cur.scalar("<I", f"tensor {name} type")
    try:
        qtype = GGMLQuantizationType(type_id)
    except ValueError:
        raise GGUFError(f"{cur.path}: tensor {name} has type {type_id}, unknown to this gguf package: upgrade "
                        "`gguf` or re-convert the file") from None
    if qtype not in GGML_QUANT_SIZES or any(d == 0 for d in dims):
        raise GGUFError(f"{cur.path}: tensor {name} has type {qtype.name} / shape {dims}, which cannot be read")
    offset = cur.scalar("<Q", f"tensor {name} offset")
    return name, tuple(reversed(dims)), qtype, offset

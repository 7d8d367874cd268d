"""mtpedge's own onnxruntime CPU kernels (`com.mtpedge` operators), built on this machine from the C sources here.

Why a compiled library at all: onnxruntime has no kernel that shares block-quantized weights across the rows of a
call or applies a Q4_1 block minimum itself (block_matmul.c says what that costs). The library is compiled once per
source version and C compiler into the cache (`~/.cache/mtpedge/kernels/`), against onnxruntime's C API headers:
`MTPEDGE_ORT_INCLUDE` names a folder holding `onnxruntime_c_api.h`, else Debian's `libonnxruntime-dev` package is
fetched once (pinned by SHA-256) and its headers kept beside the library. onnxruntime serves the C API version the
headers declare (21) to every newer runtime.

    python -m mtpedge.runtime.kernels      # build (or find) the library; prints its path and the kernel path
"""

from __future__ import annotations

import functools
import hashlib
import io
import logging
import os
import shutil
import subprocess
import tarfile
import tempfile
import urllib.request
from pathlib import Path

from ..cache import cache_root

log = logging.getLogger(__name__)

SOURCES = ("block_matmul.c", "cache_attention.c", "ort_op.c", "block_matmul.h", "cache_attention.h")
LIBRARY_NAME = "libmtpedge_kernels.so"
HEADERS_DEB = ("http://deb.debian.org/debian/pool/main/o/onnxruntime/libonnxruntime-dev_1.21.0+dfsg-1_amd64.deb",
               "14f7d959d5deacbcf1504830d4189f91fc67382b399ed9ae9d3aa9c4050ced08")
HEADER = "onnxruntime_c_api.h"
DOMAIN = "com.mtpedge"  # the operators' ONNX domain
NATIVE_LABEL = "-mtk"  # in a graph's precision label (QuantConfig.label): its weight products need this library
# what an export onto these kernels rewrites, recorded in the bundle so that a cached fast bundle of an older recipe is
# exported again: 1 = the weight products (BlockMatMul), 2 = + each layer's attention (CacheAttention)
RECIPE_VERSION = 2


class KernelsUnavailable(RuntimeError):
    """The library cannot be built or loaded here; the message says why and what to do."""


def kernels_dir() -> Path:
    return cache_root() / "kernels"


def source_digest() -> str:
    h = hashlib.sha256()
    for name in SOURCES:
        h.update((Path(__file__).parent / name).read_bytes())
    h.update(_compiler().encode())
    return h.hexdigest()[:16]


def library(build: bool = True) -> Path:
    """The built library for the current sources (built now if `build` and missing)."""
    path = kernels_dir() / source_digest() / LIBRARY_NAME
    if path.is_file():
        return path
    if not build:
        raise KernelsUnavailable(f"mtpedge's kernel library is not built ({path}): "
                                 "run `python -m mtpedge.runtime.kernels`")
    return _build(path)


def _compiler() -> str:
    return os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or shutil.which("clang") or ""


def _build(path: Path) -> Path:
    compiler = _compiler()
    if not compiler:
        raise KernelsUnavailable("no C compiler (cc/gcc/clang) to build mtpedge's kernels: install one "
                                 "(Debian: apt install gcc), or export with --kernels onnxruntime")
    _writable(path.parent)
    include = _headers()
    here = Path(__file__).parent
    with tempfile.TemporaryDirectory(dir=path.parent) as tmp:
        out = Path(tmp) / LIBRARY_NAME
        cmd = [compiler, "-O3", "-fPIC", "-shared", "-std=c11", f"-I{include}",
               *(str(here / n) for n in SOURCES if n.endswith(".c")), "-o", str(out), "-lm"]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            raise KernelsUnavailable(f"building mtpedge's kernels failed ({' '.join(cmd)}):\n{done.stderr[-2000:]}")
        os.replace(out, path)  # whole or absent: a second process building at once replaces it with the same bytes
    return path


def _writable(folder: Path) -> Path:
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise KernelsUnavailable(f"cannot write mtpedge's kernel cache {folder} ({err}): set MTPEDGE_CACHE to a "
                                 "writable folder") from err
    return folder


def _headers() -> Path:
    """A folder holding onnxruntime_c_api.h: MTPEDGE_ORT_INCLUDE, or Debian's libonnxruntime-dev fetched once."""
    given = os.environ.get("MTPEDGE_ORT_INCLUDE")
    if given:
        if not (Path(given) / HEADER).is_file():
            raise KernelsUnavailable(f"MTPEDGE_ORT_INCLUDE={given} holds no {HEADER}")
        return Path(given)
    folder = kernels_dir() / "include"
    if (folder / HEADER).is_file():
        return folder
    url, sha256 = HEADERS_DEB
    try:
        with urllib.request.urlopen(url, timeout=60) as response:
            data = response.read()
    except OSError as err:
        raise KernelsUnavailable(f"cannot fetch onnxruntime's C headers ({url}: {err}); put a folder holding "
                                 f"{HEADER} in MTPEDGE_ORT_INCLUDE, or export with --kernels onnxruntime") from err
    if hashlib.sha256(data).hexdigest() != sha256:
        raise KernelsUnavailable(f"{url} does not have the expected SHA-256 {sha256}: not using it")
    staging = Path(tempfile.mkdtemp(dir=_writable(kernels_dir()), prefix="include."))
    with tarfile.open(fileobj=io.BytesIO(_ar_member(data, "data.tar"))) as tar:
        for member in tar.getmembers():
            if member.isfile() and member.name.startswith("./usr/include/onnxruntime/") and member.name.endswith(".h"):
                name = member.name.split("/")[-1]
                (staging / name).write_bytes(tar.extractfile(member).read())
    if not (staging / HEADER).is_file():
        raise KernelsUnavailable(f"{url} holds no {HEADER}")
    try:
        staging.rename(folder)
    except OSError:  # another process got there first
        shutil.rmtree(staging, ignore_errors=True)
    return folder


def _ar_member(archive: bytes, prefix: str) -> bytes:
    """The first member of a Unix ar archive (a .deb) whose name starts with `prefix`."""
    if not archive.startswith(b"!<arch>\n"):
        raise KernelsUnavailable("the headers package is not an ar archive")
    pos = 8
    while pos + 60 <= len(archive):
        header = archive[pos:pos + 60]
        name, size = header[:16].decode().strip().rstrip("/"), int(header[48:58].decode().strip())
        if name.startswith(prefix):
            return archive[pos + 60:pos + 60 + size]
        pos += 60 + size + (size & 1)
    raise KernelsUnavailable(f"the headers package has no {prefix}* member")


@functools.cache
def native_kernels_pay() -> bool:
    """Whether the fast default bundle runs its weight products on mtpedge's kernels on this machine: the library
    builds here and takes its AVX-512 VNNI path (the portable path is a reference, far slower than onnxruntime's
    kernels). On the AVX-512 VNNI AMD EPYC of benchmarks/results/fast/README.md section 30 a width-1 call took
    0.73x, a width-16 call 0.74x and plain decoding 1.31x those of onnxruntime's MatMulNBits.
    MTPEDGE_KERNELS=onnxruntime says no."""
    if os.environ.get("MTPEDGE_KERNELS", "auto") == "onnxruntime":
        return False
    try:
        path = kernel_path(library())
    except KernelsUnavailable as err:
        log.warning("the fast bundle stays on onnxruntime's kernels: %s", err)
        return False
    return path == "avx512-vnni"


def kernel_path(lib: Path | None = None) -> str:
    """Which code path the library runs on this CPU: "avx512-vnni" or "portable"."""
    import ctypes

    fn = ctypes.CDLL(str(lib or library())).mtpedge_kernel_path
    fn.restype = ctypes.c_char_p
    return fn().decode()

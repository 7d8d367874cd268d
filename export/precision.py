"""What `mtpedge export` does after tracing float32 graphs: keep them, quantize them, or build HTP graphs.

    float32                      the traced bundle as is
    QuantConfig (gguf/int8/int4) MatMulNBits weights (quantize_bundle.py)
    QdqConfig                    16-bit-activation QDQ graphs for the HTP (qdq_bundle.py)
    QdqConfig + soc              ... compiled to QNN context binaries for that SoC (qnn_compile.py)
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from .qdq import QdqConfig
from .quant_config import QuantConfig

Precision = QuantConfig | QdqConfig | None


def finish_bundle(float_bundle: Path, out_dir: Path, precision: Precision, soc: str | None,
                  gguf_path: Path | None, progress: Callable[[str], None]) -> None:
    """Turn the complete float32 bundle `float_bundle` into `out_dir` as `precision` (and `soc`) ask."""
    if soc is not None and not isinstance(precision, QdqConfig):
        raise ValueError("--target qnn needs --precision qdq: the HTP runs QDQ graphs")
    if isinstance(precision, QuantConfig):
        from .quantize_bundle import quantize_bundle

        quantize_bundle(float_bundle, out_dir, precision, gguf_path, progress=progress)
    elif isinstance(precision, QdqConfig) and soc is None:
        from .qdq_bundle import qdq_bundle

        qdq_bundle(float_bundle, out_dir, precision, progress=progress)
    elif isinstance(precision, QdqConfig):
        from .qdq_bundle import qdq_bundle
        from .qnn_compile import compile_qnn_bundle

        work = Path(tempfile.mkdtemp(prefix=".qdq-", dir=out_dir.parent))
        try:
            qdq_bundle(float_bundle, work / "qdq", precision, progress=progress)
            compile_qnn_bundle(work / "qdq", out_dir, soc, progress=progress)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    else:
        raise ValueError(f"unknown precision setting {precision!r}")

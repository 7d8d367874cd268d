"""Which arithmetic breaks width invariance on QDQ graphs: the recipe's fp16 nodes, or the HTP itself?

    python benchmarks/htp_width_invariance_tiny.py WORK_DIR

On the tiny random LLaMA (mtpedge.models.tiny; context 256, prefill 16, decode widths 1/8/32), two QDQ bundles
(calibrated on CALIBRATION_TEXTS): `recipe` = QdqConfig() (fp16 residual stream and outlier nodes) and `integer`
= no fp16 nodes (every activation 16-bit, every weight 8/16-bit). Each runs on the CPU's QDQ emulation and,
compiled for Snapdragon 8 Elite (one binary per graph), on the HTP simulator. Over 6 steps of plain greedy
decoding, from the same cache: the width-1 call repeated (is the backend deterministic?) and the root row of
the width-8 and width-32 graphs (a dummy chain after the root), each as the largest |logit| difference from
the width-1 call. Drafting is lossless only where all three are 0. Minutes on a free CPU; WORK_DIR is reused.
"""

from __future__ import annotations

import argparse
import gc
from pathlib import Path

import numpy as np

from mtpedge.export.bundle_writer import ExportConfig, export_bundle
from mtpedge.export.qdq import QdqConfig
from mtpedge.export.qdq_bundle import qdq_bundle
from mtpedge.export.qnn_compile import compile_qnn_bundle
from mtpedge.models.tiny import make_tiny_model
from mtpedge.runtime.engine import Engine
from mtpedge.runtime.qnn import QNN_EP

CONFIGS = {"recipe": QdqConfig(calibration="texts"),
           "integer": QdqConfig(calibration="texts", float16_stream=False, outlier_ratio=0.0)}
WIDE = (8, 32)


def root_row_gaps(engine: Engine, steps: int = 6) -> np.ndarray:
    """(steps, 1 + len(WIDE)): max |logit diff| from the width-1 call of the width-1 call again and of each
    wide graph's root row."""
    ids = engine.tokenizer.encode("The quick brown fox jumps over the lazy dog again and again.")[:12]
    root = int(np.argmax(engine.prefill(ids)))
    rows = []
    for _ in range(steps):
        one = engine.run_block(engine.embed(np.array([root])), np.array([-1]))
        again = engine.run_block(engine.embed(np.array([root])), np.array([-1]))
        row = [float(np.abs(again.logits[0] - one.logits[0]).max())]
        for width in WIDE:
            chain = np.array([root, *range(5, 5 + width - 1)])
            wide = engine.run_block(engine.embed(chain), np.arange(-1, width - 1))
            row.append(float(np.abs(wide.logits[0] - one.logits[0]).max()))
        rows.append(row)
        engine.cache.commit_accepted_kv(one.new_keys, one.new_values, np.arange(1))
        root = int(np.argmax(one.logits[0]))
    return np.array(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("work")
    work = Path(parser.parse_args().work)
    work.mkdir(parents=True, exist_ok=True)
    model = work / "tiny" if (work / "tiny").exists() else make_tiny_model("llama", work / "tiny")
    bundle = work / "bundle"
    if not bundle.exists():
        export_bundle(model, bundle, ExportConfig(context=256, prefill_width=16, decode_widths=(1, *WIDE)))
    for name, config in CONFIGS.items():
        qdq, qnn = work / f"qdq-{name}", work / f"qnn-{name}"
        if not qdq.exists():
            qdq_bundle(bundle, qdq, config, quality=False)
        if not qnn.exists():
            compile_qnn_bundle(qdq, qnn, "sm8750", share_weights=False)
        for device, path, providers in (("cpu-qdq", qdq, None), ("htp", qnn, [QNN_EP])):
            engine = Engine.load(path, threads=1, providers=providers)
            gaps = root_row_gaps(engine)
            del engine
            gc.collect()  # the simulator misbehaves with many HTP sessions alive in one process
            print(f"{name} {device}: max |logit diff| from width 1 per step [width 1 again, "
                  f"{', '.join(f'width {w} root row' for w in WIDE)}]:\n{np.array2string(gaps, precision=7)}",
                  flush=True)


if __name__ == "__main__":
    main()

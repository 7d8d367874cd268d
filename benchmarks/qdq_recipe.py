"""QDQ recipe ablations: each step of export/qdq.py's recipe switched on in turn, on the widest graph only.

    python benchmarks/qdq_recipe.py FLOAT_BUNDLE --work DIR [--steps old,stream,outliers,distilled]
        [--out FILE.jsonl]

A bundle holding only FLOAT_BUNDLE's widest graph (prefill 64 for SmolLM2) goes through the real
`qdq_bundle` with each step's QdqConfig, then is compared with float32 as benchmarks/qdq_quality.py does
(held text; Spec-Bench first questions + float32's own 48-token answers; top-1 and perplexity), on the
CPU's QDQ emulation (`smooth`, `outliers10`: the default plus smoothing / a lower outlier ratio). The `w:`
steps quantize weights only (activations stay float): which 8-bit matrices cost what, with rounding to nearest or GPTQ.
One line of JSON per step is appended to --out, so an interrupted run keeps what it finished and a rerun
skips the steps already there; the calibration tokens are made once per source and kept in WORK
(calibration-SOURCE.json).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import onnx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.qdq_quality import compare, spec_prompts, summary  # noqa: E402
from mtpedge.export.qdq import QdqConfig  # noqa: E402
from mtpedge.export.qdq_bundle import qdq_bundle  # noqa: E402
from mtpedge.export.quality import HELD_TEXT, sequence_logits  # noqa: E402
from mtpedge.runtime.bundle import MANIFEST, read_manifest  # noqa: E402
from mtpedge.runtime.engine import Engine  # noqa: E402
from mtpedge.runtime.generate import generate  # noqa: E402

# the recipe before issue 19, then each change added in turn; the last one is QdqConfig(), the default
OLD = dict(calibration="texts", float16_stream=False, outlier_ratio=0.0, wide_weights=(), gptq=False,
           samples_per_graph=12)
CHANGES = [("stream", dict(float16_stream=True)), ("outliers", dict(outlier_ratio=50.0)),
           ("wide", dict(wide_weights=QdqConfig().wide_weights)), ("gptq", dict(gptq=True, samples_per_graph=24)),
           ("distilled", dict(calibration="self-distilled"))]
STEPS = {"old": QdqConfig(**OLD)}
for _name, _change in CHANGES:
    STEPS[_name] = replace(list(STEPS.values())[-1], **_change)
assert STEPS["distilled"] == QdqConfig(), "the last step is the default recipe"
# tried on top of the default recipe, not (yet) in it
STEPS["smooth"] = replace(QdqConfig(), smooth_alpha=0.5)
STEPS["outliers10"] = replace(QdqConfig(), outlier_ratio=10.0)  # more of the MLP in fp16 (qdq_recipe.md's lab rows)

# weights only (activations float): which 8-bit weights cost what. (8-bit modules or "all", rounding)
MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "lm_head")
WIDE = QdqConfig().wide_weights
WEIGHT_STEPS = {"w:nearest-all8": ("all", (), "nearest"), "w:nearest-head16": ("all", ("lm_head",), "nearest"),
                "w:nearest-wide16": ("all", WIDE, "nearest"), "w:gptq-wide16": ("all", WIDE, "gptq"),
                **{f"w:only-{m}8": ((m,), (), "nearest") for m in MODULES}}


def widest_graph_bundle(src: Path, dst: Path) -> Path:
    """A bundle of `src`'s widest graph alone, listed as a decode graph so that the runtime runs it (graph
    and weights copied: onnx refuses linked weight files; the rest linked)."""
    manifest = read_manifest(src)
    widest = max(manifest.graphs, key=lambda g: g.width)
    dst.mkdir(parents=True, exist_ok=True)
    for name in os.listdir(src):
        if name == MANIFEST or (dst / name).exists() or (name.endswith(".onnx") and name != widest.file):
            continue
        if name.endswith((".onnx", ".data")):
            shutil.copy2(src / name, dst / name)
        else:
            os.symlink((src / name).resolve(), dst / name)
    one = replace(manifest, graphs=[replace(widest, kind="decode")])
    (dst / MANIFEST).write_text(one.to_json())
    return dst


def weights_only_bundle(one: Path, dst: Path, step: str) -> Path:
    """`one` with its 8-bit weights (per WEIGHT_STEPS[step]) quantized and dequantized, all else float."""
    from mtpedge.export.qdq_bundle import RecordingEngine, calibration_stream
    from mtpedge.export.qdq_gptq import gptq_weights

    eight, wide, rounding = WEIGHT_STEPS[step]
    manifest = read_manifest(one)
    entry = manifest.graphs[0]
    model = onnx.load(str(one / entry.file))
    inits = {t.name: t for t in model.graph.initializer}
    chosen = {n.name: n.input[1] for n in model.graph.node if n.op_type == "MatMul" and n.input[1] in inits
              and (eight == "all" or set(n.name.split("/")) & set(eight)) and not set(n.name.split("/")) & set(wide)}
    if rounding == "gptq":
        config = QdqConfig()
        calls = RecordingEngine(one, config.mask_value).run_stream(calibration_stream(one, config, print),
                                                                   entry.width, config.samples_per_graph)
        values = {name: w for name, (w, _, _) in gptq_weights(model, [f for f, _ in calls],
                                                               dict.fromkeys(chosen, 8)).items()}
    else:
        values = {}
        for name, init in chosen.items():
            w = onnx.numpy_helper.to_array(inits[init])
            scale = np.maximum(np.abs(w).max(axis=0), 1e-12) / 127
            values[name] = (np.clip(np.round(w / scale), -127, 127) * scale).astype(np.float32)
    for name, init in chosen.items():
        inits[init].CopyFrom(onnx.numpy_helper.from_array(values[name], init))
    dst.mkdir(parents=True, exist_ok=True)
    for name in (manifest.tokenizer.file, manifest.embeddings_file):
        shutil.copy2(one / name, dst / name)
    onnx.save_model(model, dst / entry.file, save_as_external_data=True, location="weights.data")
    (dst / MANIFEST).write_text(manifest.to_json())
    return dst


def calibration_tokens(one: Path, work: Path, config: QdqConfig) -> list[int]:
    """calibration_stream's tokens for `config`'s source, made once and kept in `work`."""
    from mtpedge.export.qdq_bundle import calibration_stream

    kept = work / f"calibration-{config.calibration}.json"
    if not kept.exists():
        kept.write_text(json.dumps(calibration_stream(one, config, print)))
    return json.loads(kept.read_text())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("float_bundle")
    parser.add_argument("--work", required=True)
    parser.add_argument("--steps", default=",".join(STEPS),
                        help=f"comma-separated, of {', '.join(STEPS)} and the weights-only {', '.join(WEIGHT_STEPS)}")
    parser.add_argument("--out", help="JSON lines, one per step (default WORK/results.jsonl)")
    args = parser.parse_args(argv)
    work = Path(args.work)
    out = Path(args.out) if args.out else work / "results.jsonl"
    done = {json.loads(line)["step"] for line in out.read_text().splitlines()} if out.exists() else set()
    one = widest_graph_bundle(Path(args.float_bundle), work / "float")
    ref = Engine.load(one)
    held = ref.tokenizer.encode(HELD_TEXT)[:ref.context]
    prompts = [ref.tokenizer.encode_chat([{"role": "user", "content": p}])[:ref.context // 2] for p in spec_prompts(1)]
    seqs = [ids + generate(ref, ids, 48, stop_token_ids=set(), on_overflow="stop").token_ids for ids in prompts]
    ref_held, ref_seqs = sequence_logits(ref, held), [sequence_logits(ref, s) for s in seqs]
    del ref
    for step in args.steps.split(","):
        if step in done:
            continue
        started = time.perf_counter()
        if step in WEIGHT_STEPS:
            folder = weights_only_bundle(one, work / step.replace(":", "-"), step)
            config = dict(zip(("eight_bit", "sixteen_bit", "rounding"), WEIGHT_STEPS[step], strict=True))
        else:
            folder = qdq_bundle(one, work / step, STEPS[step], progress=print, quality=False,
                                calibration=calibration_tokens(one, work, STEPS[step]))
            config = vars(STEPS[step])
        built = time.perf_counter() - started
        engine = Engine.load(folder)
        result = {"step": step, "config": config,
                  "held": summary([compare(ref_held, sequence_logits(engine, held), held)]),
                  "spec": summary([compare(r, sequence_logits(engine, s), s) for s, r in zip(seqs, ref_seqs,
                                                                                               strict=True)]),
                  "float16_nodes": len(read_manifest(folder).extras.get("qdq", {}).get("float16_nodes", [])),
                  "quantize_s": round(built, 1), "load_average": os.getloadavg()[0]}
        del engine
        print(json.dumps(result), flush=True)
        with open(out, "a") as handle:
            handle.write(json.dumps(result) + "\n")
        shutil.rmtree(folder)
    return 0


if __name__ == "__main__":
    sys.exit(main())

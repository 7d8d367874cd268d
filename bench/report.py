"""The bench's outputs: one JSON document with every figure, a Markdown table, and a completeness check."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from .aggregate import OVERALL, REFERENCE_PEERS

SCHEMA = "mtpedge-bench/1"
REQUIRED_FIGURES = ("questions", "turns", "new_tokens", "decode_calls", "tau", "tokens_per_s", "speedup",
                    "same_as_baseline", "accepted_histogram")


def emit_result(doc: dict, out: str | Path | None) -> None:
    """A benchmark script's result: one JSON line on stdout, and the indented document in `out` when given."""
    if out:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps(doc))


def _fmt(value, spec: str = ".2f", none: str = "–") -> str:
    return none if value is None else format(value, spec)


def method_table(doc: dict) -> list[str]:
    lines = ["| method | kind | τ | decode calls | new tokens | tokens/s | speed-up vs none | "
             f"vs {reference_peer_of(doc)} | same as none | first token s | graph / host ms per call | "
             "RSS added at load MB | process peak RSS MB | "
             "load s |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for m in doc["methods"]:
        if m["status"] != "ran":
            continue
        s = doc["summary"][m["name"]][OVERALL]
        same = _fmt(s["same_as_baseline"] * 100 if s["same_as_baseline"] is not None else None, ".0f") + (
            f"% of {s['compared_turns']}" if s["same_as_baseline"] is not None else "")
        lines.append(_row([m["name"], m["kind"], _fmt(s["tau"]), _fmt(s["decode_calls"], "d"), s["new_tokens"],
                           _fmt(s["tokens_per_s"], ".1f"), _fmt(s["speedup"]), _fmt(s.get("vs_reference_peer")),
                           same, _fmt(s["first_token_s"], ".3f"), _per_call(s), _rss_added(m),
                           _fmt(m.get("peak_rss_mb"), ".0f"), _fmt(m.get("load_s"), ".1f")]))
    return lines


def reference_peer_of(doc: dict) -> str:
    """The peer a report's "vs" ratios divide by (reports before the native peers have no record: the binding)."""
    return doc.get("reference_peer", REFERENCE_PEERS[-1])


def _row(cells: list) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


def _per_call(summary: dict) -> str:
    graph, host = summary.get("graph_ms_per_call"), summary.get("host_ms_per_call")
    return "–" if graph is None else f"{graph:.1f} / {host:.2f}"


def _rss_added(method: dict) -> str:
    """A subprocess peer's own peak; otherwise what loading the method added to this process."""
    if method.get("subprocess_peak_rss_mb") is not None:
        return f"{method['subprocess_peak_rss_mb']:.0f} (own process)"
    return _fmt(method.get("rss_added_mb"), ".0f")


def category_table(doc: dict) -> list[str]:
    ran = [m["name"] for m in doc["methods"] if m["status"] == "ran"]
    categories = [c for c in next(iter(doc["summary"].values()), {}) if c != OVERALL] + [OVERALL]
    lines = ["| category | " + " | ".join(ran) + " |", "|---" * (len(ran) + 1) + "|"]
    for cat in categories:
        cells = []
        for name in ran:
            s = doc["summary"][name].get(cat)
            if s is None:
                cells.append("–")
                continue
            tps = f"{_fmt(s['tokens_per_s'], '.1f')} tok/s"
            if s.get("vs_reference_peer") is not None:
                tps += f", {_fmt(s['vs_reference_peer'])}× {reference_peer_of(doc)}"
            cells.append(f"τ {_fmt(s['tau'])}, {_fmt(s['speedup'])}×, {tps}" if s["tau"] is not None
                         else f"{_fmt(s['speedup'])}×, {tps}")
        lines.append(_row([cat, *cells]))
    return lines


def acceptance_table(doc: dict) -> list[str]:
    rows = [(m["name"], doc["summary"][m["name"]][OVERALL]) for m in doc["methods"] if m["status"] == "ran"]
    rows = [(n, s) for n, s in rows if s["accepted_histogram"] is not None and n != "none"]
    if not rows:
        return ["(no drafting method ran)"]
    deepest = max((int(k) for _, s in rows for k in s["accepted_histogram"]), default=0)
    lines = ["| method | " + " | ".join(f"≥{d} accepted" for d in range(1, deepest + 1)) + " | calls by accepted |",
             "|---" * (deepest + 2) + "|"]
    for name, s in rows:
        by_depth = s["acceptance_by_depth"] or {}
        cells = [_fmt(by_depth.get(str(d), 0.0) * 100, ".1f") + "%" for d in range(1, deepest + 1)]
        hist = ", ".join(f"{k}: {v}" for k, v in s["accepted_histogram"].items())
        lines.append(_row([name, *cells, hist]))
    return lines


def sizing_table(doc: dict) -> list[str]:
    """Cost-aware drafters: the tokens/s their tree sizing predicted beside what the same steps achieved."""
    rows = [(m["name"], doc["summary"][m["name"]][OVERALL]) for m in doc["methods"] if m["status"] == "ran"]
    rows = [(n, s) for n, s in rows if s.get("predicted_tokens_per_s") is not None]
    if not rows:
        return []
    lines = ["| method | predicted tokens/s | achieved tokens/s (same steps) | achieved / predicted |",
             "|---|---|---|---|"]
    for name, s in rows:
        predicted, achieved = s["predicted_tokens_per_s"], s["achieved_step_tokens_per_s"]
        lines.append(_row([name, _fmt(predicted, ".1f"), _fmt(achieved, ".1f"),
                           _fmt(achieved / predicted if achieved and predicted else None)]))
    return lines


def sweep_table(sweep: dict) -> list[str]:
    c = sweep["ceilings"]
    lines = [f"Ceilings measured here: {c['flops_per_s'] / 1e9:.1f} GFLOP/s, {c['bytes_per_s'] / 1e9:.1f} GB/s "
             f"({c['how']}).", "",
             "| graph | precision | width | median ms | ms per slot | GFLOP | MB moved | FLOP/byte | "
             "roofline ms | bound | achieved GFLOP/s |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in sweep["records"]:
        lines.append(_row([r["graph"], r["precision"], r["width"], f"{r['median_ms']:.2f}", f"{r['ms_per_slot']:.2f}",
                           f"{r['gflops']:.2f}", f"{r['mbytes']:.0f}", f"{r['intensity_flops_per_byte']:.2f}",
                           f"{r['roofline_ms']:.2f}", r["bound"], f"{r['achieved_gflops_per_s']:.1f}"]))
    return lines


def _turns(settings: dict) -> str:
    turns = settings.get("turns", "all")
    return "every turn" if turns == "all" else f"the first {turns} turn(s) of each question"


def _row_probe_line(machine: dict) -> list[str]:
    probe = machine.get("rows_width_invariant")
    if not probe or probe["invariant"]:
        return []
    return [f"On this machine the bundle's wide calls compute a chain's rows otherwise than width-1 calls (largest "
            f"difference by width: {probe['max_diff']}; runtime/row_probe.py): drafted turns need not equal plain "
            "decoding's, and mtpedge's default here is plain decoding."]


def markdown(doc: dict) -> str:
    s, m = doc["settings"], doc["machine"]
    planned = s.get("questions_planned", s["questions_run"])
    stopped = (f" (stopped by the {s['time_limit_s']:.0f} s time limit after {s['questions_run']} of {planned})"
               if s["questions_run"] < planned else "")
    out = [f"# mtpedge bench: {s['bundle_name']}", "",
           f"{s['questions_run']} questions{stopped} ({s['selection']}), {s['max_new_tokens']} new tokens max, greedy, "
           f"chat template, {_turns(s)}; {s['threads']} thread(s) per method; methods interleaved per question "
           "(order rotated). Process peak RSS is of the one process that holds every in-process method at once.",
           f"Machine: {m['cpu_model']}, {m['usable_cores']} cores ({', '.join(m['cpu_flags'])}), "
           f"{m['memory_gib']} GiB; load average {m['load_average_at_start']} at start, "
           f"{m.get('load_average_at_end')} at end. {doc['timing_note']}", *_row_probe_line(m),
           *([f"llama.cpp's build: {m['llama_cpp_features']}"] if m.get("llama_cpp_features") else []), "",
           "## All questions", "", *method_table(doc), "",
           f"## Per category (τ, speed-up vs none, mean tokens/s, vs {reference_peer_of(doc)})", "",
           *category_table(doc), "",
           "## Drafts accepted per decode call", "", *acceptance_table(doc), ""]
    sizing = sizing_table(doc)
    if sizing:
        out += ["## Cost-aware tree sizing (predicted vs achieved, mean over turns)", "", *sizing, ""]
    missing = [m for m in doc["methods"] if m["status"] != "ran"]
    if missing:
        out += ["## Not run", ""] + [f"- {m['name']}: {m['status']}: {m['reason']}" for m in missing] + [""]
    if doc.get("sweep"):
        out += ["## Width sweep (one graph call)", "", *sweep_table(doc["sweep"]), ""]
    if doc.get("plots"):
        out += ["## Plots", ""] + [f"![{p}]({p})" for p in doc["plots"]] + [""]
    out += [f"Bench wall time {doc['elapsed_s']:.0f} s."]
    return "\n".join(out) + "\n"


def validate_report(doc: dict, expect_methods: Sequence[str] = ()) -> list[str]:
    """Problems that make a report incomplete (empty list = well-formed)."""
    problems = []
    for key in ("schema", "settings", "machine", "methods", "summary", "rows", "elapsed_s"):
        if key not in doc:
            problems.append(f"missing top-level {key!r}")
    if problems:
        return problems
    if doc["schema"] != SCHEMA:
        problems.append(f"schema {doc['schema']!r}, expected {SCHEMA!r}")
    ran = {m["name"] for m in doc["methods"] if m["status"] == "ran"}
    for name in expect_methods:
        if name not in ran:
            problems.append(f"method {name!r} did not run")
    for name in ran:
        summary = doc["summary"].get(name)
        if not summary or OVERALL not in summary:
            problems.append(f"no summary for {name!r}")
            continue
        for cat, figures in summary.items():
            missing = [f for f in REQUIRED_FIGURES if f not in figures]
            if missing:
                problems.append(f"{name}/{cat} lacks {missing}")
        overall = summary[OVERALL]
        if overall["turns"] < 1 or overall["new_tokens"] < 1:
            problems.append(f"{name} produced no tokens")
    rows_by_method = {r["method"] for r in doc["rows"]}
    if ran - rows_by_method:
        problems.append(f"no rows for {sorted(ran - rows_by_method)}")
    if "sweep" in doc and doc["sweep"] is not None:
        for r in doc["sweep"].get("records", []):
            if not (r["median_ms"] > 0 and r["roofline_ms"] > 0 and r["gflops"] > 0):
                problems.append(f"sweep record {r.get('graph')} has non-positive figures")
    return problems

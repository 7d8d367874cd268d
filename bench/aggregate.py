"""Per method x category figures from per-turn rows (the same math for every method and peer).

    τ             1 + Σ accepted drafts / Σ decode calls (tokens committed per graph call; plain decoding 1)
    tokens/s      mean over rows of each row's decode rate (Spec-Bench's per-question mean)
    speed-up      mean tokens/s of the method / mean tokens/s of the baseline, over the rows both ran
    vs llama.cpp  the same ratio against the reference peer (llama.cpp on the same GGUF), when it ran
    acceptance    per depth d: the share of decode calls that accepted at least d drafts
    graph / host  ms per decode call in graph calls / outside them (mtpedge methods; the prefill's graph time is
                  taken as its whole first-token time, so its little host work counts as graph)
    predicted     cost-aware drafters: mean over rows of the tokens/s their tree sizing expected, beside the
                  tokens/s its timed steps achieved (the same steps: decode steps after the first)
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from statistics import fmean

from mtpedge.runtime.generate import accepted_drafts, calls_reaching_depth

from .runner import BASELINE, Row

OVERALL = "overall"
# the peer the "vs llama.cpp" ratios divide by: llama.cpp's own tool when it ran (what its users run; the binding's
# Python loop costs 3-6% on a fast CPU, benchmarks/results/fast/README.md section 29), else the binding
REFERENCE_PEERS = ("llama.cpp-native", "llama.cpp")


def reference_peer(rows: Sequence[Row]) -> str:
    """The first of REFERENCE_PEERS with a turn in `rows` (the binding's name when neither ran)."""
    ran = {r.method for r in rows if not r.skipped}
    return next((p for p in REFERENCE_PEERS if p in ran), REFERENCE_PEERS[-1])


def accepted_histogram(rows: Sequence[Row]) -> dict[int, int] | None:
    """Decode calls per number of accepted drafts, summed over rows; None if any row cannot say."""
    total: Counter = Counter()
    for row in rows:
        if row.accepted_per_call is None:
            return None
        total.update({int(k): v for k, v in row.accepted_per_call.items()})
    return dict(sorted(total.items()))


def acceptance_by_depth(histogram: dict[int, int]) -> dict[int, float]:
    """{d: share of calls that accepted >= d drafts} for d = 1 .. the deepest acceptance seen."""
    calls = sum(histogram.values())
    return {d: n / calls for d, n in calls_reaching_depth(histogram).items()} if calls else {}


def tau(histogram: dict[int, int] | None) -> float | None:
    calls = sum(histogram.values()) if histogram is not None else 0
    return 1.0 + accepted_drafts(histogram) / calls if calls else None


def _ratio(ran: Sequence[Row], reference: dict[tuple, Row]) -> float | None:
    """Mean tokens/s of `ran` over that of the reference's rows for the same turns."""
    paired = [(r, reference[(r.question_id, r.turn)]) for r in ran if (r.question_id, r.turn) in reference]
    base = fmean(b.tokens_per_s for _, b in paired) if paired else None
    return fmean(r.tokens_per_s for r, _ in paired) / base if paired and base else None


def _mean_of(rows: Sequence[Row], attribute: str) -> float | None:
    values = [getattr(r, attribute) for r in rows if getattr(r, attribute) is not None]
    return fmean(values) if values else None


def summarize_group(rows: Sequence[Row], baseline_rows: dict[tuple, Row],
                    peer_rows: dict[tuple, Row] | None = None) -> dict:
    ran = [r for r in rows if not r.skipped]
    hist = accepted_histogram(ran)
    compared = [r for r in ran if r.same_as_baseline is not None]
    calls = None if any(r.decode_calls is None for r in ran) else sum(r.decode_calls for r in ran)
    decode_s = sum(r.elapsed_s - r.first_token_s for r in ran)
    mean_tps = fmean(r.tokens_per_s for r in ran) if ran else None
    timed = calls and all(r.graph_s is not None for r in ran)
    decode_graph_s = sum(r.graph_s for r in ran) if timed else None
    return {
        "questions": len({r.question_id for r in ran}),
        "turns": len(ran),
        "skipped": len(rows) - len(ran),
        "new_tokens": sum(r.new_tokens for r in ran),
        "decode_calls": calls,
        "tau": tau(hist),
        "accepted_histogram": {str(k): v for k, v in hist.items()} if hist is not None else None,
        "acceptance_by_depth": {str(k): v for k, v in acceptance_by_depth(hist).items()} if hist else None,
        "tokens_per_s": mean_tps,
        "tokens_per_s_pooled": (sum(max(r.new_tokens - 1, 0) for r in ran) / decode_s) if decode_s > 0 else None,
        "first_token_s": fmean(r.first_token_s for r in ran) if ran else None,
        "graph_ms_per_call": 1e3 * decode_graph_s / calls if timed else None,
        "host_ms_per_call": 1e3 * (decode_s - decode_graph_s) / calls if timed else None,
        "predicted_tokens_per_s": _mean_of(ran, "predicted_tokens_per_s"),
        "achieved_step_tokens_per_s": _mean_of(ran, "achieved_step_tokens_per_s"),
        "speedup": _ratio(ran, baseline_rows),
        "vs_reference_peer": _ratio(ran, peer_rows) if peer_rows else None,
        "same_as_baseline": (sum(r.same_as_baseline for r in compared) / len(compared)) if compared else None,
        "compared_turns": len(compared),
        "mean_first_difference": (fmean(r.first_difference for r in compared if r.first_difference is not None)
                                  if any(r.first_difference is not None for r in compared) else None),
    }


def summarize(rows: Sequence[Row], baseline: str = BASELINE, peer: str | None = None
              ) -> dict[str, dict[str, dict]]:
    """{method: {category: figures, ..., "overall": figures}}, methods and categories in first-seen order;
    `vs_reference_peer` against `peer` (default: reference_peer(rows))."""
    peer = peer or reference_peer(rows)
    baseline_rows = {(r.question_id, r.turn): r for r in rows if r.method == baseline and not r.skipped}
    peer_rows = {(r.question_id, r.turn): r for r in rows if r.method == peer and not r.skipped}
    groups: dict[str, dict[str, list[Row]]] = defaultdict(lambda: defaultdict(list))
    for row in rows:
        groups[row.method][row.category].append(row)
    return {method: {**{cat: summarize_group(group, baseline_rows, peer_rows) for cat, group in by_cat.items()},
                     OVERALL: summarize_group([r for group in by_cat.values() for r in group], baseline_rows,
                                              peer_rows)}
            for method, by_cat in groups.items()}

"""One bench at several thread counts: a run per count (each interleaved on its own, so its ratios vs plain
decoding and vs llama.cpp are like for like), then one side-by-side summary of the runs."""

from __future__ import annotations

from pathlib import Path

from .aggregate import OVERALL
from .report import _fmt, reference_peer_of


def _ran(doc: dict) -> list[str]:
    return [m["name"] for m in doc["methods"] if m["status"] == "ran"]


def side_by_side(docs: list[dict]) -> dict:
    """{method: {threads: overall figures}} over every run, methods in first-seen order."""
    table: dict[str, dict[int, dict]] = {}
    for doc in docs:
        for name in _ran(doc):
            table.setdefault(name, {})[doc["settings"]["threads"]] = doc["summary"][name][OVERALL]
    return table


def threads_markdown(docs: list[dict], folders: list[str]) -> str:
    threads = [doc["settings"]["threads"] for doc in docs]
    table = side_by_side(docs)
    peer = reference_peer_of(docs[0])
    head = "| method | " + " | ".join(f"τ @{t} | tok/s @{t} | ×none @{t} | ×{peer} @{t}" for t in threads) + " |"
    lines = [f"# mtpedge bench at {', '.join(map(str, threads))} thread(s): {docs[0]['settings']['bundle_name']}", "",
             f"{docs[0]['settings']['questions_run']} questions ({docs[0]['settings']['selection']}), "
             f"{docs[0]['settings']['max_new_tokens']} new tokens max, greedy. One run per thread count, each "
             "interleaved on its own: ratios are within a run; absolute tokens/s are of a shared machine "
             f"(load average at start: {', '.join(str(d['machine']['load_average_at_start']) for d in docs)}).", "",
             head, "|---" * (1 + 4 * len(threads)) + "|"]
    for name, by_threads in table.items():
        cells = []
        for t in threads:
            s = by_threads.get(t)
            cells += ["–"] * 4 if s is None else [_fmt(s["tau"]), _fmt(s["tokens_per_s"], ".1f"), _fmt(s["speedup"]),
                                                    _fmt(s.get("vs_reference_peer"))]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += ["", "Per-category tables, acceptance and plots of each run: "
              + ", ".join(f"[{t} thread(s)]({f}/bench.md)" for t, f in zip(threads, folders, strict=True)), ""]
    return "\n".join(lines)


def plot_threads(docs: list[dict], path: Path) -> None:
    """Tokens/s of every method at each thread count, grouped by method."""
    from .plots import _pyplot

    plt = _pyplot()
    table = side_by_side(docs)
    threads = [doc["settings"]["threads"] for doc in docs]
    names = list(table)
    fig, ax = plt.subplots(figsize=(max(6, 0.9 * len(names) * len(threads) / 1.5), 4))
    width = 0.8 / len(threads)
    for i, t in enumerate(threads):
        values = [(table[n].get(t) or {}).get("tokens_per_s") or 0.0 for n in names]
        ax.bar([x + i * width for x in range(len(names))], values, width, label=f"{t} thread(s)")
    ax.set_xticks([x + width * (len(threads) - 1) / 2 for x in range(len(names))], names, rotation=30, ha="right")
    ax.set_ylabel("decode tokens/s (mean per turn)")
    ax.set_title("tokens/s by method and thread count")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)

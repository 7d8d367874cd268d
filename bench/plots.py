"""PNG plots of a bench report (matplotlib, the `bench` extra): τ by category, tokens/s by method, width sweep."""

from __future__ import annotations

from pathlib import Path

from .aggregate import OVERALL


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    return plt


def plot_tau_by_category(doc: dict, path: Path) -> None:
    plt = _pyplot()
    names = [m["name"] for m in doc["methods"] if m["status"] == "ran" and m["kind"] == "mtpedge"]
    categories = [c for c in doc["summary"][names[0]] if c != OVERALL] + [OVERALL]
    fig, ax = plt.subplots(figsize=(max(6, 0.8 * len(categories) * max(1, len(names)) / 2), 4))
    width = 0.8 / len(names)
    for i, name in enumerate(names):
        values = [(doc["summary"][name].get(c) or {}).get("tau") or 0.0 for c in categories]
        ax.bar([x + i * width for x in range(len(categories))], values, width, label=name)
    ax.set_xticks([x + width * (len(names) - 1) / 2 for x in range(len(categories))], categories, rotation=35,
                  ha="right")
    ax.set_ylabel("τ (tokens per graph call)")
    ax.set_title(f"τ by Spec-Bench category — {doc['settings']['bundle_name']}")
    ax.axhline(1.0, color="grey", linewidth=0.8)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_tokens_per_s(doc: dict, path: Path) -> None:
    plt = _pyplot()
    ran = [m for m in doc["methods"] if m["status"] == "ran"]
    values = [doc["summary"][m["name"]][OVERALL]["tokens_per_s"] or 0.0 for m in ran]
    colors = ["tab:blue" if m["kind"] == "mtpedge" else "tab:orange" for m in ran]
    fig, ax = plt.subplots(figsize=(max(6, 0.9 * len(ran)), 4))
    ax.bar([m["name"] for m in ran], values, color=colors)
    for x, v in enumerate(values):
        ax.text(x, v, f"{v:.1f}", ha="center", va="bottom", fontsize=8)
    ax.set_ylabel("decode tokens/s (mean per turn)")
    ax.set_title("tokens/s by method (blue: mtpedge, orange: peers) — same run, interleaved")
    ax.tick_params(axis="x", rotation=30)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_width_sweep(doc: dict, path: Path) -> None:
    plt = _pyplot()
    records = doc["sweep"]["records"]
    fig, ax = plt.subplots(figsize=(6.5, 4))
    for precision in sorted({r["precision"] for r in records}):
        for kind, marker in (("decode", "o"), ("prefill", "s")):
            rs = sorted((r for r in records if r["precision"] == precision and r["kind"] == kind),
                        key=lambda r: r["width"])
            if not rs:
                continue
            widths = [r["width"] for r in rs]
            (line,) = ax.plot(widths, [r["median_ms"] for r in rs], marker=marker,
                              label=f"{precision} {kind} measured")
            ax.plot(widths, [r["roofline_ms"] for r in rs], marker=marker, linestyle="--", alpha=0.6,
                    color=line.get_color(), label=f"{precision} {kind} roofline estimate")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("graph width (slots per call)")
    ax.set_ylabel("ms per call (median)")
    ax.set_title("graph-call latency by width")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_plots(doc: dict, folder: Path) -> list[str]:
    """Write every plot the report has data for; returns their file names."""
    written = []
    if any(m["status"] == "ran" and m["kind"] == "mtpedge" for m in doc["methods"]):
        plot_tau_by_category(doc, folder / "tau_by_category.png")
        written.append("tau_by_category.png")
    if any(m["status"] == "ran" for m in doc["methods"]):
        plot_tokens_per_s(doc, folder / "tokens_per_s.png")
        written.append("tokens_per_s.png")
    if doc.get("sweep") and doc["sweep"]["records"]:
        plot_width_sweep(doc, folder / "width_sweep.png")
        written.append("width_sweep.png")
    return written

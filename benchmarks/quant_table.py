"""One Markdown table from the quality reports of quantized bundles (issue 4's comparison table).

    python benchmarks/quant_table.py MODEL_NAME FLOAT_BUNDLE QUANTIZED_BUNDLE [QUANTIZED_BUNDLE ...] > table.md

Every figure comes from the manifest that `mtpedge quantize` wrote: its quality report measured the quantized
and the float32 bundle side by side in one process (latency ratios are therefore from one run; absolute
milliseconds depend on the machine's load at the time and are printed for reference only).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def folder_bytes(folder: Path) -> int:
    return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file())


def rows(float_bundle: Path, bundle: Path) -> tuple[list[str], list[str]]:
    """(float32 row, quantized row) of one quantized bundle's quality report."""
    extras = json.loads((bundle / "manifest.json").read_text())["extras"]
    quality = extras["quality"]
    precision = extras["quantization"]["config"]["weights"] if "quantization" in extras else "qdq"
    latency = quality["latency_ms"]
    widths = sorted(latency, key=int)
    taus = quality["tau"]

    def row(label: str, key: str, size: int) -> list[str]:
        cells = [label, f"{size / 1e6:.0f} MB"]  # the whole bundle folder: graphs, weights, tokenizer
        for width in widths:
            ms = latency[width][key]
            ratio = latency[width]["float32"] / ms
            cells.append(f"{ms:.0f} ms (x{ratio:.2f})")
        cells.append(f"{quality['perplexity'][key]:.2f}")
        cells.append("—" if key == "float32" else f"{quality['top1_agreement']:.1%}")
        cells += [f"{taus[name][key]:.2f}" for name in sorted(taus)]
        return cells

    header = ["bundle", "size"] + [f"width {w}" for w in widths] + ["perplexity", "top-1 vs float32"]
    header += [f"τ {name}" for name in sorted(taus)]
    return header, [row(f"float32 (run of {precision})", "float32", folder_bytes(float_bundle)),
                    row(precision, "quantized", folder_bytes(bundle))]


def main(argv: list[str]) -> int:
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    name, float_bundle, bundles = argv[0], Path(argv[1]), [Path(p) for p in argv[2:]]
    print(f"### {name}\n")
    for i, bundle in enumerate(bundles):
        header, (float_row, quant_row) = rows(float_bundle, bundle)
        if i == 0:
            print("| " + " | ".join(header) + " |")
            print("|" + "---|" * len(header))
        print("| " + " | ".join(float_row) + " |")
        print("| " + " | ".join(quant_row) + " |")
    print("\nLatency: ms per graph call at that width (x = float32 time / this time, measured in the same run).")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

"""Two `mtpedge bench` runs of the same questions and methods, row by row: did a change alter what decoding does?

    python benchmarks/compare_bench.py BEFORE/bench.json AFTER/bench.json

Compares, per (method, question, turn): new tokens, decode calls, the histogram of drafts accepted per call,
sameness with `none` and the first difference (all deterministic for greedy decoding on one bundle with
`--cost-model flat`); then τ per method. Speed is left out: it follows the machine's load, not the change.
Exit status 1 when any row differs.
"""

from __future__ import annotations

import json
import sys

FIELDS = ("new_tokens", "decode_calls", "accepted_per_call", "same_as_baseline", "first_difference", "skipped")


def main(argv: list[str]) -> int:
    before, after = (json.load(open(path)) for path in argv[:2])
    rows = [{(r["method"], str(r["question_id"]), r["turn"]): r for r in doc["rows"]} for doc in (before, after)]
    differ = [(key, f, row[f], rows[1].get(key, {}).get(f)) for key, row in rows[0].items() for f in FIELDS
              if row[f] != rows[1].get(key, {}).get(f)]
    print(f"rows: {len(rows[0])} before, {len(rows[1])} after; differing fields: {len(differ)}")
    for item in differ[:20]:
        print("  ", item)
    for name, summary in before["summary"].items():
        b, a = summary["overall"], after["summary"].get(name, {}).get("overall", {})
        print(f"{name:8s} τ {b['tau']:.4f} -> {a.get('tau', float('nan')):.4f}, new tokens {b['new_tokens']} -> "
              f"{a.get('new_tokens')}, same as none {b['same_as_baseline']} -> {a.get('same_as_baseline')}")
    return 1 if differ or len(rows[0]) != len(rows[1]) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

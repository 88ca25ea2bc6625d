"""Put two JSON reports side by side: ``python -m bench.compare A.json B.json [--markdown]``.

Rows are matched by case and measurement. Typical use: A from ``python -m bench``
on one commit, B on another.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any


def _fmt(r: dict[str, Any] | None) -> tuple[str, str, str]:
    if r is None:
        return ("", "", "")
    ratio = "-" if r.get("ratio") is None else f"{r['ratio']:.3f}"
    best = "" if r.get("best") is None else f"{r['best']:.3f}"
    return (r["value"], ratio + (f" ({best})" if best else ""), r.get("status", ""))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.compare", description=__doc__)
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--labels", default="A,B", help="column labels for A and B")
    args = ap.parse_args(argv)
    la, lb = args.labels.split(",")
    with open(args.a) as f:
        a = json.load(f)
    with open(args.b) as f:
        b = json.load(f)
    rows_b = {(r["case"], r["what"]): r for r in b["rows"]}
    head = ("case", "measurement", "target", f"{la}: value", f"{la}: ratio (best round)", "", f"{lb}: value",
            f"{lb}: ratio (best round)", "")  # fmt: skip
    out = [head]
    seen = set()
    for r in a["rows"]:
        key = (r["case"], r["what"])
        seen.add(key)
        out.append((r["case"], r["what"], r.get("target", ""), *_fmt(r), *_fmt(rows_b.get(key))))
    for key, r in rows_b.items():
        if key not in seen:
            out.append((r["case"], r["what"], r.get("target", ""), "", "", "", *_fmt(r)))
    widths = [max(len(str(x[i])) for x in out) for i in range(len(head))]
    lines = ["| " + " | ".join(str(c).ljust(w) for c, w in zip(out[0], widths, strict=True)) + " |"]
    lines.append("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for row in out[1:]:
        lines.append("| " + " | ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)) + " |")
    print("\n".join(lines))
    for name, rep in ((la, a), (lb, b)):
        print(
            f"\n{name}: git {rep.get('git')}, {rep.get('created')}, {rep.get('size_gb')} GB, "
            f"load average {rep.get('machine', {}).get('load_average')}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

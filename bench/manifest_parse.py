"""``python -m bench.manifest_parse``: parsing a wide manifest is linear in its components (issue 33, F11).

Builds sealed manifests of N, 2N and 4N components and times ``Manifest.from_bytes``
against ``json.loads`` of the same bytes, measured in the same run (the baseline that
is linear by construction). A linear parser keeps the ratio flat as N grows; the
quadratic one of issue 33 doubled it at each step (40k components: 12 s per parse).
"""

from __future__ import annotations

import argparse
import json
import time

from cairn.manifest import MANIFEST, FileEntry, Manifest


def _manifest_bytes(n: int) -> bytes:
    entry = FileEntry.of(b"x")
    m = Manifest()
    for i in range(n):
        m.components.append(f"c{i}")
        m.files[f"c{i}/{MANIFEST}"] = entry
    return m.to_bytes()


def _best(fn: object, rounds: int) -> float:
    best = float("inf")
    for _ in range(rounds):
        t = time.perf_counter()
        fn()  # type: ignore[operator]
        best = min(best, time.perf_counter() - t)
    return best


def main() -> None:
    """Print one line per size: parse time, json.loads time, their ratio."""
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--n", type=int, default=10_000, help="the smallest component count (then 2N, 4N)")
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    print(f"{'components':>10} {'MB':>6} {'parse s':>8} {'json.loads s':>12} {'ratio':>6}")
    for n in (args.n, 2 * args.n, 4 * args.n):
        data = _manifest_bytes(n)
        parse = _best(lambda data=data: Manifest.from_bytes(data, where="bench"), args.rounds)
        base = _best(lambda data=data: json.loads(data), args.rounds)
        print(f"{n:>10} {len(data) / 1e6:>6.1f} {parse:>8.3f} {base:>12.4f} {parse / base:>6.1f}")


if __name__ == "__main__":
    main()

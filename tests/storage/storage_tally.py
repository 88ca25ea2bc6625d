"""Counters the storage tests report at the end of the session (kills, corruptions, hostile inputs)."""

from __future__ import annotations

from collections import Counter
from typing import Any

TALLY: Counter[str] = Counter()
"""Keys: ``<kind>/tried`` and ``<kind>/refused`` (or ``/survived``), summed over the session."""


def tried(kind: str, refused: bool) -> None:
    """Record one attempt of ``kind`` and whether cairn refused it as documented."""
    TALLY[f"{kind}/tried"] += 1
    if refused:
        TALLY[f"{kind}/refused"] += 1


def lines() -> list[str]:
    """Human-readable summary lines."""
    kinds = sorted({k.split("/", 1)[0] for k in TALLY})
    out = []
    for kind in kinds:
        parts = [f"{k.split('/', 1)[1]}={v}" for k, v in sorted(TALLY.items()) if k.split("/", 1)[0] == kind]
        out.append(f"{kind}: {', '.join(parts)}")
    return out


def export() -> dict[str, int]:
    """The counts, as a pytest-xdist worker hands them to the controller."""
    return dict(TALLY)


def merge(counts: dict[str, int]) -> None:
    """Add a worker's :func:`export` (in the controller, which prints the sum)."""
    TALLY.update(counts)


_printed: list[bool] = []


def terminal_summary(terminalreporter: Any) -> None:
    """Print :func:`lines` once (both this folder's conftest and, under xdist, the root's ask)."""
    summary = lines()
    if summary and not _printed:
        _printed.append(True)
        terminalreporter.section("cairn storage counts")
        for line in summary:
            terminalreporter.write_line(line)

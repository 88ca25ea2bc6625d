"""How the ``cairn`` commands show sizes, metric values and progress.

Strings that come from a checkpoint, a metrics file or the user go through
:func:`cairn._display.safe_text` where they are printed; these helpers format
numbers, and :func:`format_value` passes other values through it too.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from cairn._display import safe_text

__all__ = ["format_value", "human_size", "progress"]


def human_size(n: float) -> str:
    """``n`` bytes in B, KB, MB, GB or TB (powers of 1024), as ``12 B`` or ``3.4 MB``."""
    for unit in ("B", "KB", "MB", "GB"):
        if abs(n) < 1024:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TB"


def format_value(v: Any) -> str:
    """A metric value for a table: floats to 4 significant digits, ``-`` for none, else its safe text."""
    if isinstance(v, float):
        return f"{v:.4g}"
    return "-" if v is None else safe_text(v)


def progress(what: str) -> Callable[[int, int], None] | None:
    """A one-line progress display of bytes on stderr, or None when stderr is not a terminal."""
    if not sys.stderr.isatty():
        return None

    def show(done: int, total: int) -> None:
        pct = 100.0 * done / total if total else 100.0
        end = "\n" if done >= total else ""
        print(f"\r{what} {human_size(done)} / {human_size(total)} ({pct:5.1f}%)", end=end, file=sys.stderr, flush=True)

    return show

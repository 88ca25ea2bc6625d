"""A fault-injecting fsspec filesystem wrapper for the retry and atomic-commit tests.

:class:`FaultyFS` delegates everything to a real filesystem (memory, s3fs,
local) and makes selected calls fail: a :class:`Fault` names the method, a
substring of the path, how many matching calls fail (``times``; None = all)
and the error to raise. Writes are matched on ``open`` in a write mode, so a
fault can stop a save at any file. Each call can also run a probe first (to
look at the committed view from the outside in the middle of a save).
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

WATCHED = frozenset(
    {"open", "cat_file", "size", "info", "exists", "isdir", "ls", "makedirs", "rm", "rm_file", "copy", "pipe_file"}
)


@dataclass
class Fault:
    """Fail ``times`` calls of ``method`` on paths containing ``path``, raising ``error()``.

    ``method`` "write" matches ``open`` in a write mode (and ``pipe_file``).
    """

    method: str
    path: str = ""
    times: int | None = 1
    error: Callable[[], BaseException] = lambda: OSError("503 Service Unavailable (injected)")
    per_path: int | None = None
    """When set, fail the first ``per_path`` matching calls on each distinct path (``times`` is ignored)."""
    fired: int = 0
    by_path: Counter[str] = field(default_factory=Counter)

    def matches(self, method: str, path: str, mode: str) -> bool:
        """Whether a call of ``method`` on ``path`` (opened in ``mode``) is one this fault hits."""
        if self.method == "write":
            hit = (method == "open" and ("w" in mode or "a" in mode)) or method == "pipe_file"
        elif self.method == "read":
            hit = (method == "open" and "r" in mode) or method == "cat_file"
        else:
            hit = method == self.method
        if not hit or self.path not in path:
            return False
        if self.per_path is not None:
            return self.by_path[f"{method}:{path}"] < self.per_path
        return self.times is None or self.fired < self.times

    def record(self, method: str, path: str) -> None:
        """Count one injected failure."""
        self.fired += 1
        self.by_path[f"{method}:{path}"] += 1


@dataclass
class FaultyFS:
    """Wraps an fsspec filesystem; matching calls raise injected errors (see :class:`Fault`)."""

    fs: Any
    faults: list[Fault] = field(default_factory=list)
    probe: Callable[[str, str], None] | None = None
    calls: Counter[str] = field(default_factory=Counter)
    injected: list[tuple[str, str, str]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.fs, name)
        if name not in WATCHED or not callable(attr):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            path = str(args[0]) if args else str(kwargs.get("path", ""))
            mode = str(args[1]) if len(args) > 1 else str(kwargs.get("mode", "rb"))
            with self._lock:
                self.calls[name] += 1
                fault = next((f for f in self.faults if f.matches(name, path, mode)), None)
                if fault is not None:
                    fault.record(name, path)
                    err = fault.error()
                    self.injected.append((name, path, type(err).__name__))
            if self.probe is not None and (name == "pipe_file" or (name == "open" and "w" in mode)):
                self.probe(name, path)
            if fault is not None:
                raise err
            return attr(*args, **kwargs)

        return call

"""Processes for the several-writers tests (``test_storage_writers.py``).

``python storage_writers_child.py loop ROOT FIRST COUNT SEED``
    Saves steps FIRST .. FIRST+COUNT-1 under the manager root ROOT, each through a
    new ``CheckpointManager(ROOT, keep_last=2)`` (so every save also runs the
    cleanup of leftovers, and retention), as two jobs on one root do. Every error
    is caught; one JSON line per save goes to stdout: ``{"step", "error", "type"}``.

``python storage_writers_child.py killed CKPT``
    Saves an :class:`Agent` of step 7 to CKPT (an object-store URI) and SIGKILLs
    itself right after the sub-folder ``group/a`` got its ``manifest.json``: a save
    killed half-way, with a complete-looking sub-folder.

ROOT and CKPT may be local paths or ``s3://`` URIs (the endpoint comes from the environment).
"""

from __future__ import annotations

import json
import os
import random
import signal
import sys
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from storage_components import Agent

import cairn


def loop(root: str, first: int, count: int, seed: int) -> None:
    """Save ``count`` steps through new managers, reporting each outcome as a JSON line."""
    rng = random.Random(seed)
    agent = Agent(2000)
    for step in range(first, first + count):
        agent.set_step(step)
        outcome: dict[str, Any] = {"step": step, "error": None, "type": None}
        try:
            cairn.CheckpointManager(root, keep_last=2).save(agent, step)
        except Exception as err:  # the test asserts that every one is a CheckpointError
            outcome["error"] = f"{type(err).__name__}: {err}"
            outcome["type"] = "CheckpointError" if isinstance(err, cairn.CheckpointError) else type(err).__name__
        print(json.dumps(outcome), flush=True)
        if rng.random() < 0.5:
            os.sched_yield()


def killed(ckpt: str) -> None:
    """Save, and die by SIGKILL once ``group/a/manifest.json`` is written."""
    import fsspec

    from cairn.storage import FsspecStorage

    real = FsspecStorage.write_file

    def write_then_die(self: FsspecStorage, path: str, chunks: Any, **kwargs: Any) -> Any:
        out = real(self, path, chunks, **kwargs)
        if path.endswith("/group/a/manifest.json"):
            os.kill(os.getpid(), signal.SIGKILL)
        return out

    FsspecStorage.write_file = write_then_die  # type: ignore[method-assign]
    assert fsspec  # the backend is imported before the save
    agent = Agent(8)
    agent.set_step(7)
    agent.save_to_path(ckpt)
    raise SystemExit("the save finished: the kill did not happen")


if __name__ == "__main__":
    if sys.argv[1] == "loop":
        loop(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))
    elif sys.argv[1] == "killed":
        killed(sys.argv[2])
    else:
        raise SystemExit(f"unknown command {sys.argv[1]!r}")

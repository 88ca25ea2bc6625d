"""A reader racing a writer's retention (issue 24, finding 4): a race is never reported as corruption.

One real process saves with ``keep_last=1`` as fast as it can; this process loops
``restore_latest`` on the same root meanwhile. Every checkpoint the reader picks may be
deleted under it. Before the fix, some restores raised "Every checkpoint ... is
damaged" and warned about damaged checkpoints that were only deleted.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import cairn
from cairn_test_components import Tree
from log_helpers import warned

WRITER = textwrap.dedent(
    """
    import os, sys
    import cairn
    from cairn_test_components import Tree
    root, stop = sys.argv[1], sys.argv[2]
    t = Tree()
    mgr = cairn.CheckpointManager(root, keep_last=1)
    step = 0
    while not os.path.exists(stop):
        step += 1
        t.mutate()
        mgr.save(t, step)
    print(step)
    """
)


def test_restore_latest_racing_a_writers_retention_never_reports_damage(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root = tmp_path / "run"
    cairn.CheckpointManager(root, keep_last=1).save(Tree(), 0)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), *sys.path])}
    stop = tmp_path / "stop"
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(root), str(stop)], env=env, stdout=subprocess.PIPE, text=True
    )
    restores, steps = 0, set()
    try:
        # A fixed number of restores, and on until the writer committed meanwhile: no wall time.
        while restores < 200 or len(steps - {0}) < 3:
            assert writer.poll() is None and restores < 20_000, (restores, steps)
            info = cairn.CheckpointManager(root).restore_latest(Tree())
            assert info is not None
            steps.add(info.step)
            restores += 1
    finally:
        stop.touch()
        out, _ = writer.communicate(timeout=600)
    assert writer.returncode == 0
    assert int(out) >= 3, (out, restores)  # the two really overlapped
    assert warned(caplog, "damaged") == []  # a race is not damage


TWO_WRITERS = textwrap.dedent(
    """
    import os, sys
    import cairn
    from cairn_test_components import Tree
    root, stop, first = sys.argv[1], sys.argv[2], int(sys.argv[3])
    import logging
    class Die(logging.Handler):  # a damage warning in a writer ends it: the reader sees it dead
        def emit(self, record):
            print(record.getMessage(), file=sys.stderr, flush=True)
            os._exit(3)
    logging.getLogger("cairn").addHandler(Die(logging.WARNING))
    t = Tree()
    mgr = cairn.CheckpointManager(root, keep_last=1)
    step = first
    while not os.path.exists(stop):
        t.mutate()
        mgr.save(t, step)
        step += 2
    print((step - first) // 2)
    """
)


def test_two_writers_on_one_root_never_warn_of_damage(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """F15 (issue 33): writers and a reader on one root report no damage that is only the other writer's work.

    Two real writer processes (even and odd steps, ``keep_last=1`` each: each one's retention
    deletes the other's steps) and a reader, with no damage warning logged (a writer that logs one exits) and
    ``damaged()`` asked on each read. The reader does a fixed number of reads, and goes on
    until it has seen each writer commit steps meanwhile: no wall time.
    """
    root = tmp_path / "run"
    cairn.CheckpointManager(root).save(Tree(), 0)
    stop = tmp_path / "stop"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), *sys.path])}
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", TWO_WRITERS, str(root), str(stop), str(first)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for first in (1, 2)
    ]
    reader = cairn.CheckpointManager(root)
    seen: dict[int, set[int]] = {0: set(), 1: set()}
    reads = 0
    try:
        while reads < 600 or min(len(s) for s in seen.values()) < 5:
            assert reads < 30_000, seen
            dead = [w for w in writers if w.poll() is not None]
            assert not dead, [w.communicate() for w in dead]
            info = reader.restore_latest(Tree())
            assert info is not None
            if info.step:
                seen[info.step % 2].add(info.step)
            assert reader.damaged() == []
            reads += 1
    finally:
        stop.touch()
        outs = [w.communicate(timeout=600) for w in writers]
    assert [w.returncode for w in writers] == [0, 0], outs
    assert warned(caplog, "damaged") == []

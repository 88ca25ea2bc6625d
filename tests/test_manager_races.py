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
import time
import warnings
from pathlib import Path

import cairn
from cairn_test_components import Tree

WRITER = textwrap.dedent(
    """
    import sys, time
    import cairn
    from cairn_test_components import Tree
    root, seconds = sys.argv[1], float(sys.argv[2])
    t = Tree()
    mgr = cairn.CheckpointManager(root, keep_last=1)
    step, end = 0, time.monotonic() + seconds
    while time.monotonic() < end:
        step += 1
        t.mutate()
        mgr.save(t, step)
    print(step)
    """
)


def test_restore_latest_racing_a_writers_retention_never_reports_damage(tmp_path: Path) -> None:
    root = tmp_path / "run"
    cairn.CheckpointManager(root, keep_last=1).save(Tree(), 0)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), *sys.path])}
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(root), "4"], env=env, stdout=subprocess.PIPE, text=True
    )
    restores = 0
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", cairn.DamagedCheckpointWarning)  # a race is not damage
            deadline = time.monotonic() + 60
            while writer.poll() is None and time.monotonic() < deadline:
                info = cairn.CheckpointManager(root).restore_latest(Tree())
                assert info is not None
                restores += 1
    finally:
        out, _ = writer.communicate(timeout=60)
    assert writer.returncode == 0
    assert int(out) >= 3 and restores >= 3, (out, restores)  # the two really overlapped

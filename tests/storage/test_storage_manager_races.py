"""A reader racing a writer's retention is never told "no checkpoint" (issue 40), locally and on S3.

One real process saves with ``keep_last=1`` as fast as it can; this process reads the same
root meanwhile (``restore_latest``, ``latest``, ``latest_info(verified=False)`` in turn)
with one manager. Every checkpoint the reader finds may be deleted under it, and on S3 a
listing may show a folder whose manifest is already gone. Each read must give a checkpoint
whose state is the one saved at its step (the old checkpoint or the new one, never
neither, never a mix), with no damage warning and no error.

Nothing here depends on time: the reader does a fixed number of reads (about a minute on
an idle machine) and goes on until it has seen the writer commit :data:`MIN_STEPS` steps
while it read, so the two overlap however the machine is loaded. ``CAIRN_RACE_READS_LOCAL``
and ``CAIRN_RACE_READS_S3`` change the number of reads (a quick run, or a longer hunt).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from storage_backends import Backend

import cairn
from cairn_test_components import Tree
from log_helpers import warned

TESTS = Path(__file__).parent.parent
READS = {
    "local": int(os.environ.get("CAIRN_RACE_READS_LOCAL", "2000")),
    "s3": int(os.environ.get("CAIRN_RACE_READS_S3", "100")),
}
MIN_STEPS = 20  # steps the writer commits while the reader reads, at least
MAX_READS = 50  # times READS: a writer that never gets to save is a failure, not an endless loop

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


@pytest.mark.parametrize("backend", ["local", "s3"], indirect=True)
def test_a_reader_racing_retention_always_finds_a_checkpoint(
    backend: Backend, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root = backend.uri("run")
    cairn.CheckpointManager(root, keep_last=1).save(Tree(), 0)  # a checkpoint exists from the start
    stop = tmp_path / "stop"
    env = backend.child_env()
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS), *sys.path])
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, root, str(stop)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    reader = cairn.CheckpointManager(root)
    reads = 0
    first = last = None
    try:
        while reads < READS[backend.name] or first is None or last - first < MIN_STEPS:
            assert reads < MAX_READS * READS[backend.name], f"the writer committed {first}..{last} only"
            assert writer.poll() is None, writer.communicate()
            if reads % 3 == 0:
                fresh = Tree()
                info = reader.restore_latest(fresh)
                assert info is not None, f"read {reads}: no checkpoint"
                assert len(fresh.history) == info.step  # the state saved at that step, whole
            elif reads % 3 == 1:
                assert reader.latest() is not None, f"read {reads}: no checkpoint"
                info = None
            else:
                info = reader.latest_info(verified=False)
                assert info is not None, f"read {reads}: no checkpoint"
            if info is not None:
                first = info.step if first is None else first
                last = info.step
            reads += 1
    finally:
        stop.touch()
        out, err = writer.communicate(timeout=600)
    assert writer.returncode == 0, err
    assert int(out) >= MIN_STEPS, (out, reads)
    assert warned(caplog, "damaged") == []  # a race is not damage (the storage's retries may be logged)

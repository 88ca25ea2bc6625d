"""A read-only filesystem: every write-side failure is a CheckpointError that says what to do; nothing is lost.

Tests run as root, for whom a folder's permission bits change nothing: the
filesystem here is a real tmpfs mounted by the test and remounted read-only
(skipped where ``mount`` is not allowed).
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from storage_components import Agent, expected_state

import cairn
from cairn.storage import LocalStorage
from cairn.testing import assert_states_equal

N = 8


def _mount(*args: str) -> None:
    subprocess.run(["mount", *args], check=True, capture_output=True, timeout=30)


@pytest.fixture
def readonly(tmp_path: Path) -> Iterator[Path]:
    """A tmpfs holding a checkpoint ``ckpt`` (step 1) and a manager root ``run`` (steps 1, 2), then read-only."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    try:
        _mount("-t", "tmpfs", "-o", "size=64m", "tmpfs", str(mnt))
    except (OSError, subprocess.SubprocessError) as err:
        pytest.skip(f"cannot mount a tmpfs here: {err}")
    try:
        agent = Agent(N)
        agent.set_step(1)
        agent.save_to_path(mnt / "ckpt")
        mgr = cairn.CheckpointManager(mnt / "run", keep_last=2)
        for step in (1, 2):
            agent.set_step(step)
            mgr.save(agent, step)
        _mount("-o", "remount,ro", str(mnt))
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], capture_output=True, timeout=30)


def _assert_read_only_error(err: cairn.CheckpointError, where: Path, *, advice: bool = True) -> None:
    msg = str(err)
    assert str(where) in msg, msg
    assert "Read-only file system" in msg, msg
    if advice:
        assert "remount it read-write or save to another path" in msg, msg


def test_save_over_a_checkpoint(readonly: Path) -> None:
    """save_to_path over an existing checkpoint: CheckpointError naming the path; the old one restores."""
    agent = Agent(N)
    agent.set_step(5)
    with pytest.raises(cairn.CheckpointError) as info:
        agent.save_to_path(readonly / "ckpt")
    _assert_read_only_error(info.value, readonly)
    got = Agent(N)
    got.restore_from_path(readonly / "ckpt")
    assert_states_equal(expected_state(1, N), got.get_state())


def test_manager_save_and_new_root(readonly: Path) -> None:
    """A manager save, and a manager on a new root: CheckpointErrors; latest() is still step 2."""
    agent = Agent(N)
    agent.set_step(3)
    mgr = cairn.CheckpointManager(readonly / "run", keep_last=2)
    with pytest.raises(cairn.CheckpointError) as info:
        mgr.save(agent, 3)
    _assert_read_only_error(info.value, readonly / "run")
    with pytest.raises(cairn.CheckpointError) as info:
        cairn.CheckpointManager(readonly / "elsewhere").save(agent, 1)
    _assert_read_only_error(info.value, readonly / "elsewhere")
    latest = mgr.latest()
    assert latest is not None and latest.endswith("step_000000002")
    assert [i.step for i in mgr.checkpoints()] == [1, 2]


def test_deletes(readonly: Path) -> None:
    """Deleting a checkpoint or a file: CheckpointError naming it (no plain OSError); nothing is gone."""
    storage = LocalStorage()
    with pytest.raises(cairn.CheckpointError) as info:
        storage.remove_tree(str(readonly / "run" / "step_000000001"))
    _assert_read_only_error(info.value, readonly / "run" / "step_000000001", advice=False)
    with pytest.raises(cairn.CheckpointError) as info:
        storage.remove(str(readonly / "ckpt" / "metadata.json"))
    _assert_read_only_error(info.value, readonly / "ckpt" / "metadata.json", advice=False)
    assert cairn.verify_checkpoint(readonly / "run" / "step_000000001") == []
    assert cairn.verify_checkpoint(readonly / "ckpt") == []


def test_cli_extract_to_read_only(readonly: Path, tmp_path: Path) -> None:
    """``cairn extract`` into the read-only filesystem: an error message, no traceback."""
    import os
    import sys

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run(
        [sys.executable, "-m", "cairn", "extract", str(readonly / "ckpt"), "stats", str(readonly / "stats-only")],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "Traceback" not in out, out
    assert "Read-only file system" in out, out

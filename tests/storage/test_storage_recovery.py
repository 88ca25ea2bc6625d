"""Recovery on every backend (SPEC 8): fall back to, and keep, the newest checkpoint that verifies."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from storage_backends import Backend
from storage_components import Agent, expected_state

import cairn
from cairn.cli import main as cli_main
from cairn.testing import assert_states_equal
from log_helpers import warned

pytest.importorskip("torch")

N = 16


def _damage(backend: Backend, step: int) -> None:
    """Flip a byte of one tensors file of a step, written as a new file (links elsewhere keep theirs)."""
    path = backend.path("run", f"step_{step:09d}", "group", "a", "tensors.safetensors")
    data = bytearray(backend.fs.cat_file(path))
    data[len(data) // 2] ^= 0xFF
    backend.fs.rm(path)
    backend.fs.pipe_file(path, bytes(data))


def _run(backend: Backend, steps: list[int], **kw: object) -> cairn.CheckpointManager:
    mgr = cairn.CheckpointManager(backend.uri("run"), **kw)  # type: ignore[arg-type]
    agent = Agent(N, with_torch=True)
    for step in steps:
        agent.set_step(step)
        mgr.save(agent, step, metrics={"score": float(step)})
    return mgr


@pytest.mark.loose_files
def test_restore_latest_falls_back_and_retention_keeps_the_sound_one(
    backend: Backend, caplog: pytest.LogCaptureFixture
) -> None:
    mgr = _run(backend, [10, 20, 30])
    _damage(backend, 30)
    fresh = Agent(N, with_torch=True)
    caplog.clear()
    info = mgr.restore_latest(fresh)
    assert warned(caplog, "step_000000030"), caplog.text
    assert info is not None and info.step == 20
    assert_states_equal(expected_state(20, N, with_torch=True), fresh.get_state())
    assert mgr.latest(verified=False) == backend.uri("run", "step_000000030")
    assert mgr.latest() == backend.uri("run", "step_000000020")

    # A restarted run saves below the damaged newest step: the newest sound one (20) survives.
    again = _run(backend, [15], keep_last=1)
    assert [i.step for i in again.checkpoints()] == [15, 20, 30]


@pytest.mark.loose_files
def test_ls_verify(backend: Backend, capsys: pytest.CaptureFixture[str]) -> None:
    _run(backend, [1, 2])
    _damage(backend, 2)
    args = ["ls", backend.uri("run"), "--verify", "--json"]
    if backend.name == "memory":  # memory:// lives in this process
        code = cli_main(args)
        out = capsys.readouterr().out
    else:
        proc = subprocess.run(
            [sys.executable, "-m", "cairn", *args],
            env=backend.child_env(),
            capture_output=True,
            text=True,
            timeout=120,
        )
        code, out = proc.returncode, proc.stdout
    rows = json.loads(out)
    assert code == 1
    assert [(r["step"], r["verified"], r["latest"]) for r in rows] == [(1, True, True), (2, False, False)]

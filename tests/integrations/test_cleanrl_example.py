"""examples/cleanrl_ppo.py: SIGKILLed mid-run and resumed, it ends bit for bit where an unstopped run ends."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("gymnasium")

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "cleanrl_ppo.py"
ITERATIONS = 6
KILL_AFTER = 3  # the iteration whose save the test waits for before the kill


def _cmd(root: Path, *extra: str) -> list[str]:
    return [sys.executable, str(EXAMPLE), "--checkpoint-dir", str(root), "--iterations", str(ITERATIONS), *extra]


def test_sigkilled_run_resumes_bit_for_bit(tmp_path: Path) -> None:
    whole, killed = tmp_path / "whole", tmp_path / "killed"
    subprocess.run(_cmd(whole), check=True, capture_output=True, timeout=600)

    proc = subprocess.Popen(_cmd(killed), stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    try:
        for line in proc.stdout:
            if line.startswith(f"iteration {KILL_AFTER} saved"):
                os.kill(proc.pid, signal.SIGKILL)
                break
    finally:
        proc.kill()
        proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL  # killed, not finished
    steps = sorted(int(p.name.split("_")[1]) for p in killed.iterdir() if p.name.startswith("step_"))
    assert steps and max(steps) < ITERATIONS

    out = subprocess.run(_cmd(killed, "--resume"), check=True, capture_output=True, text=True, timeout=600).stdout
    assert "resumed from iteration" in out

    last = f"step_{ITERATIONS:09d}"
    diff = subprocess.run(
        [sys.executable, "-m", "cairn", "diff", str(whole / last), str(killed / last)], capture_output=True, text=True
    )
    assert diff.returncode == 0, diff.stdout + diff.stderr
    verify = subprocess.run([sys.executable, "-m", "cairn", "verify", str(killed / last)], capture_output=True)
    assert verify.returncode == 0

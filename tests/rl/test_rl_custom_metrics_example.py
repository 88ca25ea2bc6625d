"""examples/custom_metrics.py: stopped, then resumed in a new process, it prints what an unstopped run prints."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "custom_metrics.py"


def _lines(out: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def test_resumed_run_continues_the_lifetime_metrics_exactly(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(EXAMPLE.parent))
    import custom_metrics

    custom_metrics.main(["--checkpoint-dir", str(tmp_path / "straight"), "--iterations", "4"])
    straight = _lines(capsys.readouterr().out)
    custom_metrics.main(["--checkpoint-dir", str(tmp_path / "stopped"), "--iterations", "4", "--stop-after", "2"])
    first = _lines(capsys.readouterr().out)

    env = {**os.environ, "PYTHONPATH": str(EXAMPLE.parents[1] / "src")}
    resumed = subprocess.run(  # a new process, as the example is meant to be run
        [sys.executable, str(EXAMPLE), "--checkpoint-dir", str(tmp_path / "stopped"), "--iterations", "4", "--resume"],
        env=env,
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
    ).stdout
    assert "resumed from iteration 2" in resumed
    rest = _lines(resumed)
    assert [r["training_iteration"] for r in first + rest] == [1, 2, 3, 4]
    assert first + rest == straight
    assert straight[-1]["env_runners/num_long_episodes"] > straight[1]["env_runners/num_long_episodes"] > 0

"""examples/custom_metrics.py: stopped, then resumed in a new process, it logs what an unstopped run logs,
and prints one short line per iteration."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "custom_metrics.py"


def _lines(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _short(out: str) -> None:
    """Readable output: a few aligned lines, never the result dict."""
    lines = out.strip().splitlines()
    assert 0 < len(lines) <= 6 and all(len(line) <= 100 and "{" not in line for line in lines), out


def test_resumed_run_continues_the_lifetime_metrics_exactly(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(EXAMPLE.parent))
    import custom_metrics

    straight_out, stopped_out = tmp_path / "straight.jsonl", tmp_path / "stopped.jsonl"
    custom_metrics.main(
        ["--checkpoint-dir", str(tmp_path / "straight"), "--iterations", "4", "--metrics-out", str(straight_out)]
    )
    _short(capsys.readouterr().out)
    straight = _lines(straight_out)
    stopped = ["--checkpoint-dir", str(tmp_path / "stopped"), "--iterations", "4", "--metrics-out", str(stopped_out)]
    custom_metrics.main([*stopped, "--stop-after", "2"])
    first = _lines(stopped_out)

    env = {**os.environ, "PYTHONPATH": str(EXAMPLE.parents[1] / "src")}
    resumed = subprocess.run(  # a new process, as the example is meant to be run
        [sys.executable, str(EXAMPLE), *stopped, "--resume"],
        env=env,
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
    ).stdout
    assert "resumed from iteration 2" in resumed
    _short(resumed)
    rest = _lines(stopped_out)[len(first) :]
    assert [r["training_iteration"] for r in first + rest] == [1, 2, 3, 4]
    assert first + rest == straight
    assert straight[-1]["env_runners/num_long_episodes"] > straight[1]["env_runners/num_long_episodes"] > 0

"""examples/self_play.py: stopped, resumed in a new process, it goes on bit for bit (issue 14 item 5)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("gymnasium")

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "self_play.py"
ITERATIONS = 4
STOP_AT = 2  # saved after the first freeze (iteration 2); the resumed run freezes at 4 itself


def _args(root: Path, iterations: int, *extra: str) -> list[str]:
    return [
        "--checkpoint-dir",
        str(root),
        "--iterations",
        str(iterations),
        "--freeze-every",
        "2",
        "--num-envs",
        "2",
        "--rollout-length",
        "24",
        "--metrics-out",
        str(root) + ".jsonl",
        *extra,
    ]


def _run(root: Path, iterations: int, *extra: str) -> str:
    """The example in a new process; returns what it printed."""
    cmd = [sys.executable, str(EXAMPLE), *_args(root, iterations, *extra)]
    return subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=600).stdout


def _run_here(root: Path, iterations: int, capsys: pytest.CaptureFixture[str]) -> str:
    """The example in this process (one interpreter start less)."""
    spec = importlib.util.spec_from_file_location("self_play_example", EXAMPLE)
    assert spec is not None and spec.loader is not None
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    example.main(_args(root, iterations))
    return capsys.readouterr().out


def _metrics(root: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in Path(str(root) + ".jsonl").read_text().splitlines()]


def test_self_play_stopped_and_resumed_in_a_new_process_goes_on_bit_for_bit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    whole, stopped = tmp_path / "whole", tmp_path / "stopped"
    out = _run_here(whole, ITERATIONS, capsys)
    assert "froze main into main_v1" in out and "froze main into main_v2" in out

    _run(stopped, STOP_AT)
    out = _run(stopped, ITERATIONS, "--resume")
    assert f"resumed at iteration {STOP_AT} with modules ['main', 'main_v1']" in out
    assert "froze main into main_v2" in out

    assert _metrics(stopped) == _metrics(whole)  # every iteration's metrics, before and after the stop
    last = f"step_{ITERATIONS:09d}"
    diff = subprocess.run(
        [sys.executable, "-m", "cairn", "diff", str(whole / last), str(stopped / last)], capture_output=True, text=True
    )
    assert diff.returncode == 0, diff.stdout + diff.stderr
    # The frozen copies do not learn: main_v1 is the same at iterations 2 and 4, main is not.
    from cairn.rl import DefaultPPORLModule
    from cairn.testing import assert_states_equal

    def module(step: int, module_id: str) -> dict[str, object]:
        path = whole / f"step_{step:09d}" / "learner_group" / "learner" / "rl_module" / module_id
        return DefaultPPORLModule.from_checkpoint(path).get_state()

    assert_states_equal(module(2, "main_v1"), module(4, "main_v1"))
    with pytest.raises(AssertionError):
        assert_states_equal(module(2, "main"), module(4, "main"))

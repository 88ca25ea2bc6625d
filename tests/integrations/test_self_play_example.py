"""examples/self_play.py: stopped, resumed in a new process, it goes on bit for bit (issue 14 item 5)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("gymnasium")

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "self_play.py"
ITERATIONS = 6
STOP_AT = 3  # after the first freeze (iteration 2); the resumed run freezes at 4 and 6 itself


def _run(root: Path, iterations: int, *extra: str) -> str:
    cmd = [
        sys.executable,
        str(EXAMPLE),
        "--checkpoint-dir",
        str(root),
        "--iterations",
        str(iterations),
        "--freeze-every",
        "2",
        "--num-envs",
        "4",
        "--rollout-length",
        "32",
        "--metrics-out",
        str(root) + ".jsonl",
        *extra,
    ]
    return subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=600).stdout


def _metrics(root: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in Path(str(root) + ".jsonl").read_text().splitlines()]


def test_self_play_stopped_and_resumed_in_a_new_process_goes_on_bit_for_bit(tmp_path: Path) -> None:
    whole, stopped = tmp_path / "whole", tmp_path / "stopped"
    out = _run(whole, ITERATIONS)
    assert "froze main into main_v1" in out and "froze main into main_v3" in out

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
    # The frozen copies do not learn: main_v1 is the same at iterations 4 and 6, main is not.
    from cairn.rl import DefaultPPORLModule
    from cairn.testing import assert_states_equal

    def module(step: int, module_id: str) -> dict[str, object]:
        path = whole / f"step_{step:09d}" / "learner_group" / "learner" / "rl_module" / module_id
        return DefaultPPORLModule.from_checkpoint(path).get_state()

    assert_states_equal(module(4, "main_v1"), module(6, "main_v1"))
    with pytest.raises(AssertionError):
        assert_states_equal(module(4, "main"), module(6, "main"))

"""examples/rllib_style_ppo.py: RLlib's quickstart, only the imports changed, runs on cairn (issue 25)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "rllib_style_ppo.py"


def test_the_rllib_quickstart_script_trains_saves_and_restores(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(EXAMPLE.parents[1] / "src")}
    out = subprocess.run(  # as a user runs it: a script of its own (__main__)
        [
            sys.executable,
            str(EXAMPLE),
            "--iterations",
            "1",
            "--num-env-runners",
            "0",
            "--train-batch-size",
            "64",
            "--checkpoint-dir",
            str(tmp_path / "ckpt"),
        ],
        env=env,
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
    ).stdout
    assert "'training_iteration': 1" in out
    assert f"restored PPO at iteration 1 from {tmp_path / 'ckpt'}" in out
    assert (tmp_path / "ckpt" / "learner_group").is_dir()

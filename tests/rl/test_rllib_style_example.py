"""examples/rllib_style_ppo.py: RLlib's quickstart, only the imports changed, runs on cairn (issue 25)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "rllib_style_ppo.py"


def test_the_rllib_quickstart_script_trains_saves_and_restores(tmp_path: Path) -> None:
    """As a user runs it, without --checkpoint-dir: a few short lines, and its temporary folder is gone after."""
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = {**os.environ, "PYTHONPATH": str(EXAMPLE.parents[1] / "src"), "TMPDIR": str(scratch)}
    out = subprocess.run(  # as a user runs it: a script of its own (__main__)
        [sys.executable, str(EXAMPLE), "--iterations", "1", "--num-env-runners", "0", "--train-batch-size", "64"],
        env=env,
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
    ).stdout
    lines = out.strip().splitlines()
    assert len(lines) == 2 and lines[0].startswith("iteration 1: return "), out
    assert lines[1].startswith(f"restored PPO at iteration 1 from {scratch}"), out  # saved in its temporary folder
    # ...and removed it (torch keeps its compile cache, torchinductor_<user>, in TMPDIR: not the example's)
    assert [p.name for p in scratch.iterdir() if not p.name.startswith("torchinductor_")] == []

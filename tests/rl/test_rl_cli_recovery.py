"""``cairn train --resume`` falls back to the newest checkpoint that verifies (SPEC 8, issue 13 item 12)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pack_helpers import tensor_file

SMALL = ["--set", "rollout_length=16", "--set", "num_envs_per_env_runner=1", "--set", "num_epochs=1"]


def main(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """Run the ``cairn`` entry point in this process (no torch import per call)."""
    from cairn.cli import main as cairn_main

    code = cairn_main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def damage(folder: Path) -> Path:
    """Flip a byte in the module's tensors file, as a new file (hard links elsewhere keep theirs)."""
    f = tensor_file(folder / "learner_group" / "learner" / "rl_module" / "default_policy")
    data = bytearray(f.read_bytes())
    data[-1] ^= 0xFF
    f.unlink()
    f.write_bytes(bytes(data))
    return f


def test_resume_skips_a_corrupted_latest_checkpoint(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = str(tmp_path / "run")
    code, _, err = main(
        capsys, "train", "--iterations", "2", "--checkpoint-dir", run, "--checkpoint-every", "1", *SMALL
    )
    assert code == 0, err
    damage(Path(run) / "step_000000002")

    resume = ["train", "--iterations", "3", "--checkpoint-dir", run, "--checkpoint-every", "1", "--resume"]
    code, _, err = main(capsys, *resume, *SMALL)
    assert code == 0, err
    lines = err.splitlines()
    skipped = [line for line in lines if "skipped the damaged checkpoint" in line]
    assert len(skipped) == 1 and "step_000000002" in skipped[0] and "checksum" in skipped[0]
    assert any("resumed from" in line and "step_000000001 (iteration 1)" in line for line in lines)
    assert "iter 2/3" in err and "Traceback" not in err
    # The run went on from step 1: iteration 2 was trained again and saved over the damaged one.
    code, out, _ = main(capsys, "ls", run, "--verify", "--json")
    assert code == 0
    assert [(r["step"], r["verified"]) for r in json.loads(out)] == [(1, True), (2, True), (3, True)]


def test_resume_when_every_checkpoint_is_damaged(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = str(tmp_path / "run")
    code, _, err = main(capsys, "train", "--iterations", "1", "--checkpoint-dir", run, *SMALL)
    assert code == 0, err
    damage(Path(run) / "step_000000001")
    code, _, err = main(capsys, "train", "--iterations", "2", "--checkpoint-dir", run, "--resume", *SMALL)
    assert code != 0 and "Traceback" not in err
    lines = err.strip().splitlines()
    assert "skipped the damaged checkpoint" in lines[0] and "step_000000001" in lines[0]
    assert "cairn train: error: Every checkpoint" in lines[-1] and len(lines) == 2


def test_evaluate_a_root_skips_a_corrupted_latest_checkpoint(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`cairn evaluate ROOT` picks the newest checkpoint that loads, through the manager (verified reads)."""
    run = str(tmp_path / "run")
    code, _, err = main(
        capsys, "train", "--iterations", "2", "--checkpoint-dir", run, "--checkpoint-every", "1", *SMALL
    )
    assert code == 0, err
    damage(Path(run) / "step_000000002")
    code, out, err = main(capsys, "evaluate", run, "--episodes", "1")
    assert code == 0, err
    assert "step_000000002" in err and "skipped" in err.lower()
    skipped = [line for line in err.splitlines() if "skipped the damaged checkpoint" in line]
    assert len(skipped) == 1 and skipped[0].startswith("cairn evaluate: warning: ")  # the command that skipped it
    assert "step_000000001" in err and "mean return over 1 episodes:" in out
    code, out, err = main(capsys, "-q", "evaluate", run, "--episodes", "1")  # -q: errors only
    assert code == 0 and "skipped" not in err and "mean return over 1 episodes:" in out
    # A damaged checkpoint named directly is an error, not a silent fallback.
    code, _, err = main(capsys, "evaluate", str(Path(run) / "step_000000002"), "--episodes", "1")
    assert code != 0 and "checksum" in err

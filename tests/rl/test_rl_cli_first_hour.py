"""``cairn train`` as a newcomer meets it (issue 36): one-line errors that name the fix, a safe
``--resume`` that keeps the run's options, RLlib's names in ``--set``, and Ctrl-C that saves.

Real CartPole (and :mod:`pausing_env`) training, kept short; the Ctrl-C tests signal a real
``cairn`` subprocess at points they wait for (files, lines), never after a fixed time.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

SMALL = ["--set", "rollout_length=16", "--set", "num_envs_per_env_runner=1", "--set", "num_epochs=1"]
TESTS = Path(__file__).resolve().parents[1]
SRC = TESTS.parent / "src"


def main(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """Run the ``cairn`` entry point in this process."""
    from cairn.cli import main as cairn_main

    code = cairn_main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def test_errors_are_one_line_and_name_the_fix(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = main(capsys, "train", "--env", "CartPol-v1", "--iterations", "1")
    assert code == 1 and "did you mean CartPole-v1" in one_line(err)
    code, _, err = main(capsys, "train", "--env", "multi:cartpole-v1", "--iterations", "1")
    assert code == 1 and "did you mean multi:CartPole-v1" in one_line(err)
    code, _, err = main(capsys, "train", "--set", "lrr=1e-3", "--iterations", "1")
    assert code == 1 and "no setting 'lrr' (did you mean lr?)" in one_line(err)
    code, _, err = main(capsys, "train", "--set", "lr=abc", "--iterations", "1")
    assert code == 1 and "lr takes a number" in one_line(err)
    code, _, err = main(capsys, "train", "--set", "num_epochs=1.5", "--iterations", "1")
    assert code == 1 and "num_epochs takes an integer" in one_line(err)
    code, _, err = main(capsys, "train", "--set", "train_batch_size_per_learner=0", "--iterations", "1")
    assert code == 1 and "train_batch_size_per_learner=0 is refused" in one_line(err)
    code, _, err = main(capsys, "train", "--iterations", "-1")
    assert code == 1 and "--iterations must be an integer from 0" in one_line(err)


def test_set_takes_rllibs_names_as_the_builder_does(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from cairn.rl import PPO, PPOConfig

    run = tmp_path / "run"
    settings = ["train_batch_size_per_learner=64", "lambda_=0.9", "num_epochs=1", "minibatch_size=32"]
    argv = ["train", "--iterations", "1", "--checkpoint-dir", str(run)]
    code, _, err = main(capsys, *argv, *(w for s in settings for w in ("--set", s)))
    assert code == 0, err
    restored = PPO.from_checkpoint(str(run / "step_000000001"))
    built = PPOConfig().training(train_batch_size_per_learner=64, lambda_=0.9, num_epochs=1, minibatch_size=32)
    built.env_runners(num_envs_per_env_runner=4)  # cairn train's PPO default (RLlib's, and the library's, is 1)
    built.observation_filter = "MeanStdFilter"  # cairn train chooses it for PPO (and says so)
    built.training(lr=2.5e-4, grad_clip=0.5)  # cairn train's PPO optimizer (CleanRL's; PPOConfig's are RLlib's)
    assert restored.config == built
    assert restored.config.gae_lambda == 0.9 and built.rollout_length * built.num_envs_per_env_runner == 64
    restored.stop()
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert rows[-1]["num_env_steps_sampled_lifetime"] == 64


def test_resume_is_safe_and_keeps_the_runs_options(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "cartpole"
    first = ["--iterations", "2", "--checkpoint-every", "1", "--keep-last", "5", *SMALL]
    code, _, err = main(capsys, "train", "--checkpoint-dir", str(run), *first)
    assert code == 0, err
    assert json.loads((run / "train_options.json").read_text()) == {
        "iterations": 2,
        "checkpoint_every": 1,
        "keep_last": 5,
    }

    # A mistyped folder is refused (with the folder meant), never a new run.
    code, _, err = main(capsys, "train", "--checkpoint-dir", str(tmp_path / "cartpol"), "--resume")
    assert code == 2 and "no folder" in one_line(err) and "did you mean cartpole?" in err
    assert not (tmp_path / "cartpol").exists()
    (tmp_path / "empty").mkdir()
    code, _, err = main(capsys, "train", "--checkpoint-dir", str(tmp_path / "empty"), "--resume")
    assert code == 2 and "holds no checkpoint" in one_line(err)
    # --iterations is the total: below the restored iteration says so.
    code, _, err = main(capsys, "train", "--checkpoint-dir", str(run), "--resume", "--iterations", "1")
    assert code == 2 and "--iterations 1 is below the iteration the run resumes at (2)" in err.splitlines()[-1]

    # Without options, a resume takes the run's own: --iterations 2 (nothing to train).
    code, out, err = main(capsys, "train", "--checkpoint-dir", str(run), "--resume")
    assert code == 0 and "nothing to train" in err and "iteration 2" in out
    assert "INFO" not in err  # the library's info records show with -v only
    # A new --iterations; --checkpoint-every 1 and --keep-last 5 are still the run's.
    code, _, err = main(capsys, "-v", "train", "--checkpoint-dir", str(run), "--resume", "--iterations", "4")
    assert code == 0 and "the run's own --checkpoint-every 1, --keep-last 5" in err
    # The manager's logger, shown with -v: which checkpoint the resume used.
    assert f"cairn train: info: used {run / 'step_000000002'} (step 2), the newest checkpoint that loads" in err
    assert sorted(p.name for p in run.glob("step_*")) == [f"step_00000000{i}" for i in range(1, 5)]
    assert json.loads((run / "train_options.json").read_text())["iterations"] == 4

    # cairn evaluate on an env whose spaces do not fit names both sides.
    code, _, err = main(capsys, "evaluate", str(run), "--env", "Pendulum-v1", "--episodes", "1")
    line = one_line(err)
    assert code == 1 and "Pendulum-v1 does not fit the module" in line
    assert "reads observations Box (4,) float32 and acts in Discrete(2)" in line
    assert "gives observations Box (3,) float32 and takes actions Box (1,) float32" in line


def test_a_damaged_options_file_is_refused_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "run"
    code, _, err = main(capsys, "train", "--checkpoint-dir", str(run), "--iterations", "1", *SMALL)
    assert code == 0, err
    for text in (
        '{"iterations": 1e9999}',
        "[]",
        '{"iterations": -5, "checkpoint_every": 1, "keep_last": 1}',
        "x" * 5000,
    ):
        (run / "train_options.json").write_text(text)
        code, _, err = main(capsys, "train", "--checkpoint-dir", str(run), "--resume")
        assert code == 1 and "train_options.json" in one_line(err) and "delete it" in err


# ---------------------------------------------------------------------- Ctrl-C


class Training:
    """``cairn train`` on :class:`pausing_env.PausingEnv` in a subprocess, its stderr read as it comes."""

    def __init__(self, tmp_path: Path, *extra: str) -> None:
        self.pause_dir = tmp_path / "pause"
        self.pause_dir.mkdir()
        self.run = tmp_path / "run"
        self.env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(SRC), str(TESTS), os.environ.get("PYTHONPATH", "")]),
        }
        argv = [
            "--import",
            "pausing_env",
            "train",
            "--env",
            "pausing_env:PausingEnv",
            "--set",
            json.dumps({"pause_dir": str(self.pause_dir)}).join(["env_config=", ""]),
            "--checkpoint-dir",
            str(self.run),
            "--iterations",
            "1000",
            "--checkpoint-every",
            "1000",
            *SMALL,
            *extra,
        ]
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "cairn", *argv],
            cwd=tmp_path,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line)

    def wait_for(self, what: str, check: object) -> None:
        """Poll ``check()`` until true (the process must not end first); bounded far above any load."""
        deadline = time.monotonic() + 240
        while not check():  # type: ignore[operator]
            assert self.proc.poll() is None, f"cairn train ended waiting for {what}:\n{''.join(self.lines)}"
            assert time.monotonic() < deadline, f"no {what}:\n{''.join(self.lines)}"
            time.sleep(0.02)

    def pause_mid_iteration(self) -> None:
        """Let an iteration complete, then hold the next one in the env's step."""
        metrics = self.run / "metrics.jsonl"
        self.wait_for("a first iteration", lambda: metrics.exists() and metrics.read_text().count("\n") >= 1)
        (self.pause_dir / "pause").touch()
        self.wait_for("the pause", lambda: (self.pause_dir / "paused").exists())

    def interrupt(self) -> None:
        """Send SIGINT and wait until cairn train says it will save."""
        seen = len([line for line in self.lines if "Ctrl-C" in line])
        self.proc.send_signal(signal.SIGINT)
        self.wait_for("the Ctrl-C notice", lambda: len([line for line in self.lines if "Ctrl-C" in line]) > seen)

    def finish(self) -> tuple[int, str, str]:
        assert self.proc.stdout is not None
        out = self.proc.stdout.read()
        code = self.proc.wait(timeout=240)
        self._reader.join(timeout=60)
        return code, out, "".join(self.lines)


def test_ctrl_c_saves_a_checkpoint_and_prints_the_resume_command(tmp_path: Path) -> None:
    training = Training(tmp_path)
    try:
        training.pause_mid_iteration()
        training.interrupt()
        (training.pause_dir / "pause").unlink()  # the iteration goes on to its end
        code, out, err = training.finish()
    finally:
        training.proc.kill()
    assert code == 130, err
    iteration = json.loads((training.run / "metrics.jsonl").read_text().splitlines()[-1])["training_iteration"]
    step = training.run / f"step_{iteration:09d}"
    assert step.is_dir() and f"latest checkpoint {step}" in out  # --checkpoint-every 1000: saved for Ctrl-C
    assert f"saved {step}" in err and "Traceback" not in err
    command = shlex.split(
        next(line for line in err.splitlines() if line.startswith("To go on: ")).removeprefix("To go on: ")
    )
    assert command[0] == "cairn" and "--resume" in command

    # The printed command continues the run, with its recorded options (here one more iteration).
    resumed = subprocess.run(
        [sys.executable, "-m", "cairn", *command[1:], "--iterations", str(iteration + 1)],
        cwd=tmp_path,
        env=training.env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert resumed.returncode == 0, resumed.stderr
    assert f"resumed from {step} (iteration {iteration})" in resumed.stderr
    assert (training.run / f"step_{iteration + 1:09d}").is_dir()


def test_a_second_ctrl_c_stops_at_once_and_leaves_nothing_half_written(tmp_path: Path) -> None:
    training = Training(tmp_path, "--checkpoint-every", "1")
    try:
        training.pause_mid_iteration()
        done = json.loads((training.run / "metrics.jsonl").read_text().splitlines()[-1])["training_iteration"]
        training.interrupt()
        training.proc.send_signal(signal.SIGINT)  # while the env still holds the iteration
        code, out, err = training.finish()
    finally:
        training.proc.kill()
    assert code == 130 and err.strip().splitlines()[-1] == "cairn train: interrupted", err
    assert "Traceback" not in err and out == ""
    # The iteration in progress was not saved; every checkpoint there is whole.
    steps = sorted(p.name for p in training.run.glob("step_*"))
    assert steps and steps[-1] == f"step_{done:09d}"
    listed = subprocess.run(
        [sys.executable, "-m", "cairn", "ls", str(training.run), "--verify", "--json"],
        env=training.env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert listed.returncode == 0, listed.stderr
    assert [r["step"] for r in json.loads(listed.stdout)] == [int(s.removeprefix("step_")) for s in steps]
    assert sorted(p.name for p in training.run.iterdir() if not p.name.startswith(("step_", "events."))) == [
        "cairn-latest.json",  # the manager's pointer to its newest commit (issue 40)
        "metrics.jsonl",
        "train_options.json",
    ]

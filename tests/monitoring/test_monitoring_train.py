"""``cairn train``'s metrics.jsonl and TensorBoard events: per iteration, kill-safe, resume without duplicates."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from cairn.cli.metrics_log import METRICS_FILE, MetricsLog, TensorBoardLog, read_metrics

SRC = str(Path(__file__).resolve().parents[2] / "src")
ITERATIONS = 16
EVERY = 4
STEPS_PER_ITERATION = 512  # cairn train's PPO: 4 envs (TRAIN_NUM_ENVS) x 128 steps
SENTINEL = -12345.0


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = SRC + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines(keepends=True) if path.exists() else []


def _train_args(run: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "cairn",
        "train",
        "--iterations",
        str(ITERATIONS),
        "--checkpoint-dir",
        str(run),
        "--checkpoint-every",
        str(EVERY),
        *extra,
    ]


class KilledRun:
    """A run SIGKILLed after its first checkpoint, with a cut line appended, then resumed."""

    def __init__(self, run: Path, before_kill: list[str], checkpoint_at_kill: int, resumed: str) -> None:
        self.run = run
        self.before_kill = before_kill
        self.checkpoint_at_kill = checkpoint_at_kill
        self.resumed = resumed


@pytest.fixture(scope="module")
def killed_run(tmp_path_factory: pytest.TempPathFactory) -> KilledRun:
    run = tmp_path_factory.mktemp("killed") / "run"
    metrics = run / METRICS_FILE
    proc = subprocess.Popen(
        _train_args(run, "--seed", "3"),
        env=_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 240
    try:
        # Kill once the run has logged iterations past a committed checkpoint, so that the
        # resume has lines to drop.
        while time.monotonic() < deadline and proc.poll() is None:
            committed = sorted(run.glob("step_*/metadata.json")) if run.exists() else []
            if committed and len(_lines(metrics)) >= EVERY + 2:
                break
            time.sleep(0.02)
        if proc.poll() is not None:
            stderr = proc.stderr.read().decode() if proc.stderr is not None else ""
            pytest.fail(f"cairn train ended (status {proc.returncode}) before it could be killed: {stderr[-2000:]}")
        proc.send_signal(signal.SIGKILL)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=60)
        if proc.stderr is not None:
            proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL

    before = _lines(metrics)
    checkpoints = sorted(int(p.parent.name.split("_")[1]) for p in run.glob("step_*/metadata.json"))
    checkpoint = checkpoints[-1] if checkpoints else 0
    # Make sure the file has what a kill can leave: a line of an iteration after the
    # checkpoint (the killed run may or may not have got that far) and a cut last line.
    with metrics.open("a", encoding="utf-8") as f:
        f.write(json.dumps({"training_iteration": checkpoint + 1, "env_runners/episode_return_mean": SENTINEL}) + "\n")
        f.write('{"training_iteration": 99, "episode_ret')
    resumed = subprocess.run(_train_args(run, "--resume"), env=_env(), capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    return KilledRun(run, before, checkpoint, resumed.stderr)


def test_kill_then_resume_leaves_one_line_per_iteration(killed_run: KilledRun) -> None:
    k = killed_run.checkpoint_at_kill
    assert k >= EVERY and len(killed_run.before_kill) >= k
    assert f"iteration {k})" in killed_run.resumed

    lines = _lines(killed_run.run / METRICS_FILE)
    assert all(line.endswith("\n") for line in lines)
    rows = [json.loads(line) for line in lines]  # every line is whole JSON
    assert [r["training_iteration"] for r in rows] == list(range(1, ITERATIONS + 1))
    # The lines up to the restored checkpoint are kept as they were; the later ones were redone.
    assert lines[:k] == killed_run.before_kill[:k]
    assert SENTINEL not in [r["env_runners/episode_return_mean"] for r in rows]
    for i, row in enumerate(rows, 1):
        assert row["num_env_steps_sampled_lifetime"] == i * STEPS_PER_ITERATION
        assert isinstance(row["wall_time"], float) and row["perf/time_total_s"] > 0
        assert "learners/default_policy/policy_loss" in row and "env_runners/episode_return_mean" in row
        assert not [k for k in row if k.split("/")[0] in ("learner", "env_runner", "episode_return_mean")]
    totals = [r["perf/time_total_s"] for r in rows]
    walls = [r["wall_time"] for r in rows]
    assert totals == sorted(totals) and walls == sorted(walls)
    assert read_metrics(str(killed_run.run)) == rows


def test_tensorboard_events_after_kill_and_resume(killed_run: KilledRun) -> None:
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    assert "TensorBoard events are off" not in killed_run.resumed
    rows = read_metrics(str(killed_run.run))
    events = EventAccumulator(str(killed_run.run))
    events.Reload()
    tags = set(events.Tags()["scalars"])
    expected = {
        "env_runners/episode_return_mean",
        "env_runners/num_env_steps_sampled_lifetime",
        "learners/default_policy/entropy",
        "perf/time_total_s",
    }
    assert expected <= tags and "training_iteration" not in tags and "wall_time" not in tags
    # Each value once, under RLlib's names: none of the names before issue 37.
    assert "episode_return_mean" not in tags and "perf/iteration_time_s" not in tags
    assert not [t for t in tags if t.startswith(("learner/", "env_runner/"))]
    for tag in expected:
        scalars = events.Scalars(tag)
        # The events a killed run wrote after its checkpoint are purged: one value per step.
        assert [s.step for s in scalars] == list(range(1, ITERATIONS + 1)), tag
        assert [s.value for s in scalars] == pytest.approx([r[tag] for r in rows], rel=1e-6)
        assert [s.wall_time for s in scalars] == pytest.approx([r["wall_time"] for r in rows])


def test_training_without_tensorboard(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Event files are written by cairn itself: no tensorboard package needed (only to view them)."""
    from cairn.cli import main

    for name in ("tensorboard", "torch.utils.tensorboard"):
        monkeypatch.setitem(sys.modules, name, None)  # an import now raises ImportError
    run = tmp_path / "run"
    code = main(["train", "--iterations", "2", "--checkpoint-dir", str(run), "--set", "rollout_length=64"])
    err = capsys.readouterr().err
    assert code == 0, err
    assert "tensorboard" not in err.lower()
    assert len(list(run.glob("events.out.tfevents.*"))) == 1
    assert [r["training_iteration"] for r in read_metrics(str(run))] == [1, 2]


def _row(i: int, **extra: Any) -> dict[str, Any]:
    return {"training_iteration": i, "num_env_steps_sampled_lifetime": 10 * i, "perf/time_total_s": float(i), **extra}


def test_metrics_log_rewrites_to_the_start_iteration(tmp_path: Path) -> None:
    path = tmp_path / METRICS_FILE
    path.write_text("".join(json.dumps(_row(i)) + "\n" for i in range(1, 6)) + '{"training_iteration": 6, "cu')
    log = MetricsLog(str(tmp_path), start_iteration=3)
    try:
        assert [r["training_iteration"] for r in read_metrics(str(path))] == [1, 2, 3]
        assert log.time_total_s == 3.0
        row = log.append({"training_iteration": 4, "x": float("nan"), "y": 1.5, "skip": [1]}, iteration_time_s=0.5)
        assert row["perf/time_total_s"] == 3.5 and row["x"] is None and "skip" not in row
    finally:
        log.close()
    rows = read_metrics(str(tmp_path))
    assert [r["training_iteration"] for r in rows] == [1, 2, 3, 4] and rows[-1]["y"] == 1.5
    assert not [p for p in tmp_path.iterdir() if p.name != METRICS_FILE]  # no temporary file left
    with pytest.raises(ValueError, match="closed"):
        log.append({"training_iteration": 5}, iteration_time_s=0.0)

    # A fresh start (iteration 0) empties the file.
    MetricsLog(str(tmp_path), start_iteration=0).close()
    assert path.read_text() == ""


def test_read_metrics_keeps_the_last_row_of_each_iteration(tmp_path: Path) -> None:
    rows = [_row(1, v=1), _row(2, v=2), _row(3, v=3), _row(2, v=20), _row(3, v=30), _row(4, v=40)]
    (tmp_path / METRICS_FILE).write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert [(r["training_iteration"], r["v"]) for r in read_metrics(str(tmp_path))] == [
        (1, 1),
        (2, 20),
        (3, 30),
        (4, 40),
    ]
    (tmp_path / METRICS_FILE).write_text(json.dumps(_row(1)) + "\nnot json\n" + json.dumps(_row(2)) + "\n")
    with pytest.raises(ValueError, match="line 2"):
        read_metrics(str(tmp_path))
    with pytest.raises(FileNotFoundError, match="cairn train's --checkpoint-dir"):
        read_metrics(str(tmp_path / "nothing"))


def test_tensorboard_log_writes_scalars_per_iteration(tmp_path: Path) -> None:
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    board = TensorBoardLog.open(str(tmp_path), start_iteration=0)
    assert board is not None
    for i in range(1, 4):
        board.append({**_row(i), "wall_time": 1000.0 + i, "a/b": i * 0.5, "nan": None, "flag": True})
    board.close()
    # A restart at iteration 2 hides the old step 3.
    board = TensorBoardLog.open(str(tmp_path), start_iteration=2)
    assert board is not None
    board.append({**_row(3), "wall_time": 2000.0, "a/b": 9.0})
    board.close()
    events = EventAccumulator(str(tmp_path))
    events.Reload()
    assert set(events.Tags()["scalars"]) == {"a/b", "num_env_steps_sampled_lifetime", "perf/time_total_s"}
    assert [(s.step, s.value, s.wall_time) for s in events.Scalars("a/b")] == [
        (1, 0.5, 1001.0),
        (2, 1.0, 1002.0),
        (3, 9.0, 2000.0),
    ]


def test_tensorboard_event_file_records(tmp_path: Path) -> None:
    """The records are TFRecord frames of the Events SummaryWriter(purge_step=k + 1) writes."""
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_file_loader import LegacyEventFileLoader
    from tensorboard.compat.proto import event_pb2

    board = TensorBoardLog.open(str(tmp_path), start_iteration=4)
    board.append({**_row(5), "wall_time": 1005.0, "big": 1e300, "neg": -2})
    board.close()
    (path,) = tmp_path.glob("events.out.tfevents.*")
    events = list(LegacyEventFileLoader(str(path)).Load())  # checks both CRCs of every record
    assert [e.WhichOneof("what") for e in events] == ["file_version", "file_version", "session_log", "summary"]
    assert events[0].file_version == "brain.Event:2"
    assert (events[2].step, events[2].session_log.status) == (5, event_pb2.SessionLog.START)
    assert (events[3].step, events[3].wall_time) == (5, 1005.0)
    values = {v.tag: v.simple_value for v in events[3].summary.value}
    assert values == {"num_env_steps_sampled_lifetime": 50.0, "perf/time_total_s": 5.0, "big": math.inf, "neg": -2.0}


def test_metrics_log_and_manager_record_the_same_row(tmp_path: Path) -> None:
    """One rule for both records of an iteration: numpy scalars kept as numbers, NaN as null.

    metrics.jsonl once dropped numpy integers and float32 values that the manager's recorded
    metrics kept (two copies of the rule had drifted).
    """
    import numpy as np
    import torch

    from cairn import CheckpointManager
    from cairn.cli.metrics_log import jsonable
    from cairn.torch import Module

    results = {
        "training_iteration": np.int64(4),
        "env_runners": {"episode_return_mean": np.float32(12.5), "num_episodes": np.int64(3)},
        "loss": float("nan"),
        "skip": np.zeros(3),
        "note": None,
    }
    row = jsonable(results)
    assert row == {
        "training_iteration": 4,
        "env_runners/episode_return_mean": 12.5,
        "env_runners/num_episodes": 3,
        "loss": None,
        "note": None,
    }
    assert type(row["training_iteration"]) is int and type(row["env_runners/num_episodes"]) is int

    log = MetricsLog(str(tmp_path / "run"), start_iteration=0)
    try:
        logged = log.append(results, iteration_time_s=0.5)
    finally:
        log.close()
    assert {k: logged[k] for k in row} == row

    with CheckpointManager(str(tmp_path / "ckpts")) as manager:
        manager.save(Module(torch.nn.Linear(2, 1)), 4, metrics=results)
        (info,) = manager.checkpoints()
    assert info.metrics == row

"""``cairn train --log-to wandb|mlflow``: metrics under RLlib's names and checkpoints as artifacts,
logged for real and offline (wandb's offline mode, MLflow's local file store)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

SMALL = ["--set", "rollout_length=16", "--set", "num_envs_per_env_runner=1", "--set", "num_epochs=1"]
SRC = Path(__file__).resolve().parents[2] / "src"


def train(tmp_path: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cairn", "train", "--iterations", "2", "--checkpoint-every", "1", *SMALL, *args],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(SRC), **env},
        capture_output=True,
        text=True,
        timeout=300,
    )


def rows(run: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def wandb_records(path: Path) -> list[Any]:
    """The records of a W&B run file (``run-ID.wandb``): LevelDB log blocks of ``Record`` protobufs.

    wandb 0.2x reads them in its Go core only; this reads the format it writes: a 7-byte
    header (``:W&B``, magic, version), then 32 KiB blocks of chunks (CRC, length, kind).
    """
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    assert data[:4] == b":W&B"
    block, pos, pending, out = 32768, 7, b"", []
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # a block's tail too short for a chunk header is padding
            pos += block - pos % block
            continue
        length, kind = int.from_bytes(data[pos + 4 : pos + 6], "little"), data[pos + 6]
        pending += data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # FULL, LAST
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            out.append(record)
            pending = b""
    return out


def test_wandb_offline(tmp_path: Path) -> None:
    pytest.importorskip("wandb")
    run = tmp_path / "cartpole"
    env = {"WANDB_MODE": "offline", "WANDB_DIR": str(tmp_path), "WANDB_SILENT": "true", "WANDB_CONSOLE": "off"}
    result = train(tmp_path, env, "--checkpoint-dir", str(run), "--log-to", "wandb", "--log-checkpoints")
    assert result.returncode == 0, result.stderr
    [run_file] = list(tmp_path.glob("wandb/offline-run-*/run-*.wandb"))
    records = wandb_records(run_file)
    history = []
    for r in records:
        if r.WhichOneof("record_type") == "history":
            item = {i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in r.history.item}
            history.append(item)
    assert [h["_step"] for h in history] == [1, 2]
    for logged, row in zip(history, rows(run), strict=True):
        assert logged["env_runners/num_env_steps_sampled_lifetime"] == row["num_env_steps_sampled_lifetime"]
        assert logged["learners/default_policy/entropy"] == pytest.approx(row["learner/default_policy/entropy"])
        # each value once, under RLlib's names: no deprecated flat alias
        assert "episode_return_mean" not in logged and not [k for k in logged if k.startswith("learner/")]
    artifacts = [r.artifact for r in records if r.WhichOneof("record_type") == "artifact"]
    assert [a.type for a in artifacts] == ["model", "model"]
    assert {"manifest.json", "metadata.json"} <= {e.path for e in artifacts[-1].manifest.contents}
    [started] = [r.run for r in records if r.WhichOneof("record_type") == "run"]
    assert started.display_name == "cartpole"
    assert {u.key: json.loads(u.value_json) for u in started.config.update}["lr"] == 0.00025


def test_mlflow_file_store(tmp_path: Path) -> None:
    pytest.importorskip("mlflow")
    import mlflow

    store = tmp_path / "mlruns"
    env = {
        "MLFLOW_TRACKING_URI": store.as_uri(),
        "MLFLOW_ALLOW_FILE_STORE": "true",  # MLflow 3 keeps the file store for local use behind this switch
        "MLFLOW_EXPERIMENT_NAME": "cairn-test",
    }
    run = tmp_path / "cartpole"
    result = train(tmp_path, env, "--checkpoint-dir", str(run), "--log-to", "mlflow", "--log-checkpoints")
    assert result.returncode == 0, result.stderr

    os.environ["MLFLOW_ALLOW_FILE_STORE"] = "true"
    try:
        client = mlflow.MlflowClient(tracking_uri=store.as_uri())
        experiment = client.get_experiment_by_name("cairn-test")
        [found] = client.search_runs([experiment.experiment_id])
        run_id = found.info.run_id
        assert found.info.run_name == "cartpole" and found.info.status == "FINISHED"
        history = client.get_metric_history(run_id, "env_runners/episode_return_mean")
        expected = [(r["training_iteration"], r["env_runners/episode_return_mean"]) for r in rows(run)]
        expected = [(step, value) for step, value in expected if value is not None]  # NaN before an episode ends
        assert [(m.step, m.value) for m in history] == pytest.approx(expected)
        assert "episode_return_mean" not in found.data.metrics
        assert found.data.params["lr"] == json.dumps(0.00025)
        logged = {f.path for f in client.list_artifacts(run_id, "checkpoints/step_2")}
        assert "checkpoints/step_2/manifest.json" in logged
    finally:
        del os.environ["MLFLOW_ALLOW_FILE_STORE"]


def test_log_checkpoints_needs_a_tracker(tmp_path: Path) -> None:
    result = train(tmp_path, {}, "--log-checkpoints", "--checkpoint-dir", str(tmp_path / "run"))
    assert result.returncode == 2 and "--log-checkpoints needs --log-to" in result.stderr

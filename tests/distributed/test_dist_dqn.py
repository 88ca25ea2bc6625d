"""DQN with two remote env runners resumes bit for bit in a new driver process (buffer, targets, metrics)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("ray", reason="Ray is not installed (pip install 'cairn-rl[ray]')")

from dist_helpers import assert_same_states

from cairn.rl import DQN, DQNConfig

TESTS = Path(__file__).resolve().parents[1]
SRC = TESTS.parent / "src"
N, M = 3, 3

CONFIG = {
    "seed": 11,
    "num_env_runners": 2,
    "num_envs_per_env_runner": 2,
    "rollout_length": 16,  # 64 env steps per iteration over both runners
    "replay_buffer_capacity": 300,  # wraps in iteration 5
    "replay_buffer_chunk_rows": 64,
    "num_steps_sampled_before_learning_starts": 64,
    "train_frequency": 4,
    "target_network_update_freq": 40,
    "minibatch_size": 16,
    "epsilon_timesteps": 300,
    "n_step": 2,
    "model_config": {"hidden_sizes": [16]},
}

# The resumed run: a new driver process that joins the running cluster.
RESUME = r"""
import json, sys
import ray
ray.init(address=sys.argv[1], log_to_driver=False, configure_logging=False,
         runtime_env={"env_vars": {"PYTHONPATH": sys.argv[3]}})
from cairn.rl import DQN

algo = DQN.from_checkpoint(sys.argv[2])
try:
    results = [algo.train().flatten(wall_clock=False) for _ in range(int(sys.argv[4]))]
    algo.save_to_path(sys.argv[5])
    print(json.dumps(results))
finally:
    algo.stop()
"""


def _results(algo: DQN, n: int) -> list[dict[str, Any]]:
    return [algo.train().flatten(wall_clock=False) for _ in range(n)]


def test_dqn_two_remote_runners_resume_in_a_new_driver_is_exact(ray_cluster: Any, tmp_path: Path) -> None:
    straight = DQN(DQNConfig(**CONFIG))
    try:
        _results(straight, N)
        mid = straight.save_to_path(tmp_path / "mid")
        expected = _results(straight, M)
        final = straight.save_to_path(tmp_path / "final")
    finally:
        straight.stop()
    assert expected[-1]["num_gradient_steps"] == 16 and expected[-1]["replay_buffer/default_policy/size"] == 300

    python_path = os.pathsep.join([str(TESTS), str(SRC)])
    address = ray_cluster.get_runtime_context().gcs_address
    out = subprocess.run(
        [sys.executable, "-c", RESUME, address, mid, python_path, str(M), str(tmp_path / "resumed")],
        env={**os.environ, "PYTHONPATH": python_path},
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    ).stdout
    assert json.loads(out.strip().splitlines()[-1]) == json.loads(json.dumps(expected))
    # Every folder: weights, target weights, optimizer, buffer, both runners' RNGs and envs, counters.
    assert_same_states(final, str(tmp_path / "resumed"))

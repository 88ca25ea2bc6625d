"""Exact resume across processes: N iterations, save, new process, M more == N + M straight."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cairn.rl import PPO
from cairn.testing import assert_states_equal

# fresh: train N (save "mid" there), go on M more without a stop, save "final".
# resume: from_checkpoint("mid") in this new process, train M, save "final".
SCRIPT = r"""
import json, sys
from cairn.rl import PPO, PPOConfig

mode, env, n, m, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
if mode == "fresh":
    algo = PPO(PPOConfig(env=env, seed=7, num_envs_per_env_runner=2, rollout_length=64,
                         minibatch_size=32, num_epochs=2))
    for _ in range(n):
        algo.train()
    algo.save_to_path(out + "/mid")
else:
    algo = PPO.from_checkpoint(mode)
metrics = [algo.train() for _ in range(m)]
algo.save_to_path(out + "/final")
with open(out + "/metrics.json", "w") as f:
    json.dump([r.flatten(wall_clock=False) for r in metrics], f)
"""


def run(out: Path, mode: str, env: str, n: int, m: int) -> Path:
    out.mkdir()
    env_vars = dict(os.environ)
    src = str(Path(__file__).resolve().parents[2] / "src")
    env_vars["PYTHONPATH"] = src + os.pathsep + env_vars.get("PYTHONPATH", "")
    subprocess.run(
        [sys.executable, "-c", SCRIPT, mode, env, str(n), str(m), str(out)],
        check=True,
        env=env_vars,
        timeout=300,
    )
    return out


@pytest.mark.parametrize("env", ["CartPole-v1", "Pendulum-v1", "multi:CartPole-v1"])
def test_resume_in_a_new_process_is_bit_for_bit(env: str, tmp_path: Path) -> None:
    n, m = 3, 3
    straight = run(tmp_path / "straight", "fresh", env, n, m)
    resumed = run(tmp_path / "resumed", str(straight / "mid"), env, n, m)

    straight_metrics = json.loads((straight / "metrics.json").read_text())
    resumed_metrics = json.loads((resumed / "metrics.json").read_text())
    assert resumed_metrics[0]["training_iteration"] == n + 1
    assert straight_metrics == resumed_metrics

    # Weights, optimizer state, filters, env state, RNGs, counters: all equal.
    a = PPO.from_checkpoint(straight / "final")
    b = PPO.from_checkpoint(resumed / "final")
    assert_states_equal(a.get_state(), b.get_state())

"""Callbacks on remote env runners: custom lifetime metrics continue exactly in a new driver process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("ray", reason="Ray is not installed (pip install 'cairn-rl[ray]')")

import ray
from dist_helpers import small_config

from cairn.rl import PPO
from callback_helpers import LongEpisodes

TESTS = Path(__file__).resolve().parents[1]
SRC = TESTS.parent / "src"
N, M = 2, 2

# The resumed run: a new driver process that joins the running cluster (starting another takes ~10 s).
RESUME = r"""
import json, sys
import ray
ray.init(address=sys.argv[1], log_to_driver=False, configure_logging=False,
         runtime_env={"env_vars": {"PYTHONPATH": sys.argv[3]}})
import callback_helpers  # the program imports the callbacks' module; the checkpoint never does
from cairn.rl import PPO

algo = PPO.from_checkpoint(sys.argv[2])
try:
    results = [algo.train().flatten(wall_clock=False) for _ in range(int(sys.argv[4]))]
    runners = [s["metrics"] for s in ray.get([a.get_own_state.remote() for a in algo.env_runner_group.remote.actors])]
    print(json.dumps({"results": results, "algorithm": algo.metrics.get_state(), "runners": runners}))
finally:
    algo.stop()
"""


def _results(algo: PPO, n: int) -> list[dict[str, Any]]:
    return [algo.train().flatten(wall_clock=False) for _ in range(n)]


def _runner_metrics(algo: PPO) -> list[dict[str, Any]]:
    """Each remote runner's own metrics logger state, in worker order."""
    remote = algo.env_runner_group.remote
    assert remote is not None
    return [s["metrics"] for s in ray.get([a.get_own_state.remote() for a in remote.actors])]


def _plain(value: Any) -> Any:
    """As JSON gives it back (tuples become lists)."""
    return json.loads(json.dumps(value))


def test_two_remote_runners_custom_lifetime_metrics_resume_exactly(ray_cluster: Any, tmp_path: Path) -> None:
    straight = PPO(small_config(num_env_runners=2, callbacks_class=LongEpisodes))
    try:
        first = _results(straight, N)
        path = straight.save_to_path(tmp_path / "mid")
        expected = _results(straight, M)
        expected_runners = _runner_metrics(straight)
        expected_algo = straight.metrics.get_state()
    finally:
        straight.stop()
    # Each runner hands its increments up every iteration (RLlib 2.60: a leaf's lifetime sum restarts at 0);
    # the algorithm's root lifetime sum holds the total over both, and it grew.
    key = ["num_long_episodes"]
    held = [next(r["state"]["lifetime_sum"] for r in m["stats"] if r["key"] == key) for m in expected_runners]
    assert held == [0, 0]
    total = next(r["state"]["lifetime_sum"] for r in expected_algo["stats"] if r["key"] == ["env_runners", *key])
    assert total == expected[-1]["env_runners/num_long_episodes"] > first[-1]["env_runners/num_long_episodes"] > 0

    python_path = os.pathsep.join([str(TESTS), str(SRC)])
    address = ray_cluster.get_runtime_context().gcs_address
    out = subprocess.run(
        [sys.executable, "-c", RESUME, address, path, python_path, str(M)],
        env={**os.environ, "PYTHONPATH": python_path},
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    ).stdout
    resumed = json.loads(out.strip().splitlines()[-1])
    assert resumed["results"] == _plain(expected)
    assert resumed["algorithm"] == _plain(expected_algo)
    assert resumed["runners"] == _plain(expected_runners)

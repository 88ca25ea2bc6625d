"""Callbacks on remote env runners: their custom lifetime metrics continue exactly across a checkpoint."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("ray", reason="Ray is not installed (pip install 'cairn-rl[ray]')")

import ray
from dist_helpers import small_config

from cairn.rl import PPO
from cairn.testing import assert_states_equal
from callback_helpers import LongEpisodes


def _results(algo: PPO, n: int) -> list[dict[str, Any]]:
    return [{k: v for k, v in algo.train().items() if not k.startswith("perf/")} for _ in range(n)]


def _runner_metrics(algo: PPO) -> list[dict[str, Any]]:
    """Each remote runner's own metrics logger state, in worker order."""
    remote = algo.env_runner_group.remote
    assert remote is not None
    return [s["metrics"] for s in ray.get([a.get_own_state.remote() for a in remote.actors])]


def test_two_remote_runners_custom_lifetime_metrics_resume_exactly(ray_cluster: Any, tmp_path: Path) -> None:
    straight = PPO(small_config(num_env_runners=2, callbacks_class=LongEpisodes))
    try:
        first = _results(straight, 2)
        path = straight.save_to_path(tmp_path / "mid")
        expected = _results(straight, 2)
        expected_runners = _runner_metrics(straight)
        expected_algo = straight.metrics.get_state()
    finally:
        straight.stop()
    # Both runners' episodes are summed in the algorithm's logger.
    runner_counts = [
        next(r["values"][0] for r in m["stats"] if r["key"] == ["num_long_episodes"]) for m in expected_runners
    ]
    assert all(c > 0 for c in runner_counts)
    assert (
        sum(runner_counts) == expected[-1]["env_runners/num_long_episodes"] > first[-1]["env_runners/num_long_episodes"]
    )
    resumed = PPO.from_checkpoint(path)
    try:
        assert _results(resumed, 2) == expected
        assert_states_equal(_runner_metrics(resumed), expected_runners)
        assert_states_equal(resumed.metrics.get_state(), expected_algo)
    finally:
        resumed.stop()

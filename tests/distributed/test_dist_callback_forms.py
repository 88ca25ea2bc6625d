"""Function-form callbacks and the Episode API on a remote Ray env runner, resumed exactly from a checkpoint."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("ray", reason="Ray is not installed (pip install 'cairn-rl[ray]')")

import ray
from dist_helpers import small_config

from cairn.rl import PPO
from episode_callbacks_helpers import PoleAngles, fn_episode_end


def _results(algo: PPO, n: int) -> list[dict[str, Any]]:
    return [algo.train().flatten(wall_clock=False) for _ in range(n)]


def _remote_episodes(algo: PPO) -> list[Any]:
    """The remote runner's episodes in flight (its env state's ``episode_api``)."""
    remote = algo.env_runner_group.remote
    assert remote is not None
    states = ray.get([actor.get_own_state.remote() for actor in remote.actors])
    return [s["env"]["episode_api"] for s in states]


def test_a_remote_runner_calls_functions_by_reference_and_keeps_custom_data(ray_cluster: Any, tmp_path: Path) -> None:
    # The worker resolves "episode_callbacks_helpers:fn_episode_end" after importing the module the
    # driver allowed (driver_names): it was never sent as a function.
    config = small_config(
        num_env_runners=1,
        rollout_length=24,
        model_config={"hidden_sizes": [8]},
        callbacks_class=PoleAngles,
        callbacks_on_episode_end=fn_episode_end,
    )
    straight = PPO(config)
    try:
        first = _results(straight, 1)
        path = straight.save_to_path(tmp_path / "mid")
        in_flight = _remote_episodes(straight)
        expected = _results(straight, 2)
    finally:
        straight.stop()
    assert first[0]["env_runners/fn_episodes"] > 0 and first[0]["env_runners/pole_angle_max"] > 0
    assert any(e["custom_data"]["angles"] and e["length"] > 0 for e in in_flight[0]["episodes"])
    resumed = PPO.from_checkpoint(path)
    try:
        restored = _remote_episodes(resumed)
        assert [[e["id"] for e in r["episodes"]] for r in restored] == [
            [e["id"] for e in r["episodes"]] for r in in_flight
        ]
        assert [[e["custom_data"]["angles"] for e in r["episodes"]] for r in restored] == [
            [e["custom_data"]["angles"] for e in r["episodes"]] for r in in_flight
        ]
        assert _results(resumed, 2) == expected
    finally:
        resumed.stop()

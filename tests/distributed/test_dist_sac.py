"""SAC with two remote env runners resumes bit for bit: weights, targets, the three optimizers, the buffer."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("ray", reason="Ray is not installed (pip install 'cairn-rl[ray]')")

from cairn.rl.algorithms.sac.sac import SAC, SACConfig
from cairn.testing import assert_states_equal


def _config() -> SACConfig:
    return SACConfig(
        env="Pendulum-v1",
        seed=5,
        num_env_runners=2,
        rollout_length=20,
        minibatch_size=16,
        replay_buffer_capacity=64,
        replay_buffer_chunk_rows=16,
        num_steps_sampled_before_learning_starts=30,
        model_config={"hidden_sizes": [16]},
    )


def _metrics(algo: SAC, n: int) -> str:
    # As JSON text, so that the NaN of a return mean before the first episode ends compares equal.
    return json.dumps([algo.train().flatten(wall_clock=False) for _ in range(n)])


def test_two_remote_runners_sac_resume_is_exact(ray_cluster: Any, tmp_path: Path) -> None:
    straight = SAC(_config())
    try:
        _metrics(straight, 2)
        path = straight.save_to_path(tmp_path / "mid")
        expected = _metrics(straight, 2)
        expected_state = straight.get_state(not_components=["env_runner"])
    finally:
        straight.stop()
    assert json.loads(expected)[-1]["num_gradient_steps"] > 0
    resumed = SAC.from_checkpoint(path)  # new env runner actors
    try:
        assert resumed.env_runner_group.num_env_runners == 2
        assert _metrics(resumed, 2) == expected
        assert_states_equal(resumed.get_state(not_components=["env_runner"]), expected_state)
    finally:
        resumed.stop()

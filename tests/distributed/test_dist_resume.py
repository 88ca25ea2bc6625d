"""A Ray run (remote env runners and data-parallel learners) resumes bit for bit at the same scale."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("ray", reason="Ray is not installed (pip install 'cairn-rl[ray]')")

from dist_helpers import assert_same_states, learner_state, small_config

from cairn.rl import PPO
from cairn.testing import assert_states_equal


def _metrics(algo: PPO, n: int) -> list[dict[str, Any]]:
    return [algo.train().flatten(wall_clock=False) for _ in range(n)]


def test_two_runners_two_learners_resume_is_exact(ray_cluster: Any, tmp_path: Path) -> None:
    straight = PPO(small_config(num_env_runners=2, num_learners=2))
    try:
        _metrics(straight, 2)
        path = straight.save_to_path(tmp_path / "mid")
        # The state gathered in the driver and written by it is the same as the actors wrote.
        gathered = straight.save_to_path(tmp_path / "gathered", state=straight.get_state())
        assert_same_states(path, gathered)
        expected = _metrics(straight, 2)
        expected_learner = learner_state(straight)
    finally:
        straight.stop()
    resumed = PPO.from_checkpoint(path)
    try:
        assert resumed.env_runner_group.num_env_runners == 2 and resumed.learner_group.num_learners == 2
        assert _metrics(resumed, 2) == expected
        assert_states_equal(learner_state(resumed), expected_learner)
    finally:
        resumed.stop()


def test_local_runner_with_two_remote_learners(ray_cluster: Any, tmp_path: Path) -> None:
    """num_env_runners=0, num_learners=2: the local runner takes the weights learner 0 broadcasts."""
    algo = PPO(small_config(num_env_runners=0, num_learners=2))
    try:
        _metrics(algo, 2)
        states = algo.learner_group.remote.get_all_states()  # type: ignore[union-attr]
        assert_states_equal(states[0], states[1])
        assert_states_equal(algo.env_runner.module.get_state(), algo.learner_group.get_weights())
        path = algo.save_to_path(tmp_path / "ckpt")
        saved = learner_state(algo)
        _metrics(algo, 1)
        algo.restore_from_path(path)
        assert_states_equal(learner_state(algo), saved)
        assert_states_equal(algo.env_runner.module.get_state(), algo.learner_group.get_weights())
    finally:
        algo.stop()

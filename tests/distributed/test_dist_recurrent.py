"""Recurrent modules on Ray: remote env runners keep and checkpoint each slot's LSTM state; data-parallel
learners split minibatches by sequence and take the step one learner takes."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest
import torch

pytest.importorskip("ray", reason="Ray is not installed (pip install 'cairn-rl[ray]')")

from dist_helpers import learner_state, small_config

from cairn.rl import PPO, PPOLearner
from cairn.rl.examples.envs.classes.stateless_cartpole import StatelessCartPole
from cairn.testing import assert_states_equal

if "StatelessCartPole-v1" not in gym.registry:
    gym.register("StatelessCartPole-v1", entry_point=StatelessCartPole, max_episode_steps=500)


def lstm_config(**overrides: Any) -> Any:
    return dataclasses.replace(
        small_config(
            env="cairn.rl.examples.envs.classes.stateless_cartpole:StatelessCartPole",  # importable on the workers
            num_envs_per_env_runner=3,
            rollout_length=24,
            minibatch_size=24,
            model_config={"hidden_sizes": [8], "use_lstm": True, "lstm_cell_size": 8, "max_seq_len": 5},
        ),
        **overrides,
    )


def _metrics(algo: PPO, n: int) -> list[dict[str, Any]]:
    return [algo.train().flatten(wall_clock=False) for _ in range(n)]


def test_lstm_remote_runner_two_learners_resume_exactly_and_split_by_sequence(ray_cluster: Any, tmp_path: Path) -> None:
    algo = PPO(lstm_config(num_env_runners=1, num_learners=2))
    try:
        _metrics(algo, 2)
        path = algo.save_to_path(tmp_path / "mid")
        expected = _metrics(algo, 2)
        expected_learner = learner_state(algo)
        states = algo.learner_group.remote.get_all_states()  # type: ignore[union-attr]
        assert_states_equal(states[0], states[1])  # both learners took the same steps
        # Restored in place: the remote runner's episodes go on with the LSTM memory they had at the
        # save (the same actions, returns and updates), the learners from the same state.
        algo.restore(path)
        assert _metrics(algo, 2) == expected
        assert_states_equal(learner_state(algo), expected_learner)

        # 2 learners on their sequences of each minibatch take the step 1 learner takes on all of them.
        batch = algo.env_runner_group.sample_batches()[0]["default_policy"]
        processed = {"default_policy": algo._postprocess(batch, "default_policy")}
        assert processed["default_policy"]["loss_mask"].shape[1] == 5
        single = PPOLearner(algo.config, algo.learner_group.module_specs)
        single.set_state(learner_state(algo))
        algo.learner_group.update(processed)
        single.update(processed)
        remote, local = learner_state(algo), single.get_state()
        for name, tensor in local["rl_module"]["default_policy"].items():
            torch.testing.assert_close(remote["rl_module"]["default_policy"][name], tensor, rtol=1e-4, atol=1e-5)
        assert remote["counters"] == local["counters"]
    finally:
        algo.stop()

"""PrevActionsPrevRewards (RLlib's env-to-module piece): each slot's last actions and rewards, checkpointed."""

from __future__ import annotations

import dataclasses
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from prev_rewards_helpers import two_actions_one_reward

from cairn.errors import IncompatibleCheckpointError
from cairn.rl import PPOConfig
from cairn.rl.env.env_runner import EnvRunner
from cairn.rl.examples.envs.classes.stateless_cartpole import StatelessCartPole
from cairn.testing import assert_states_equal

ENV = "StatelessCartPole-v1"
if ENV not in gym.registry:
    gym.register(ENV, entry_point=StatelessCartPole, max_episode_steps=500)


def config(**overrides: Any) -> PPOConfig:
    base = PPOConfig(
        env=ENV,
        seed=1,
        num_envs_per_env_runner=3,
        rollout_length=40,
        observation_filter=None,  # the raw windows in the batch
        model_config={"hidden_sizes": [8], "use_lstm": True, "lstm_cell_size": 8, "max_seq_len": 5},
    )
    return dataclasses.replace(base.env_runners(env_to_module_connector=two_actions_one_reward), **overrides)


def test_each_observation_carries_its_episodes_last_actions_and_reward() -> None:
    runner = EnvRunner(config())
    assert runner.observation_space.shape == (2 + 2 * 2 + 1,)  # obs, two one-hot actions, one reward
    batch = runner.sample_batches()["default_policy"]
    obs, actions, rewards = batch["obs"], batch["actions"], batch["rewards"]
    dones = batch["terminateds"] | batch["truncateds"]
    assert dones.any()
    for n in range(3):
        start = 0  # the first step of the slot's current episode
        for t in range(40):
            if t > 0 and dones[t - 1, n]:
                start = t
            one_hot = np.zeros((2, 2), dtype=np.float32)  # the last two actions, oldest first; zeros before the start
            for k, back in enumerate((2, 1)):
                if t - back >= start:
                    one_hot[k, actions[t - back, n]] = 1.0
            assert obs[t, n, 2:6].tolist() == one_hot.reshape(-1).tolist(), (t, n)
            assert obs[t, n, 6] == (rewards[t - 1, n] if t - 1 >= start else 0.0), (t, n)


def test_the_windows_and_last_actions_are_checkpointed_and_a_wrong_shape_is_refused() -> None:
    runner = EnvRunner(config())
    runner.sample_batches()
    state = runner.get_state()
    assert state["env"]["prev_actions"].shape == (3,)
    saved = state["env"]["connectors"]["env_to_module_connector"]["PrevActionsPrevRewards"]
    assert saved["actions"].shape == (3, 2, 2) and saved["rewards"].shape == (3, 1)
    other = EnvRunner(config())
    other.set_state(state)
    assert_states_equal(other.get_state(), state)
    a, b = runner.sample_batches()["default_policy"], other.sample_batches()["default_policy"]
    assert all(np.array_equal(a[k], b[k]) for k in a)

    bad = runner.get_state()
    bad["env"]["prev_actions"] = np.zeros(4, dtype=np.int64)
    with pytest.raises(IncompatibleCheckpointError, match="prev_actions and prev_rewards"):
        other.set_state(bad)
    bad = runner.get_state()
    bad["env"]["connectors"]["env_to_module_connector"]["PrevActionsPrevRewards"]["rewards"] = np.zeros((3, 2))
    with pytest.raises(IncompatibleCheckpointError, match="n_prev_actions / n_prev_rewards"):
        other.set_state(bad)
    with pytest.raises(ValueError, match="n_prev_actions"):
        from cairn.rl.connectors.env_to_module import PrevActionsPrevRewards

        PrevActionsPrevRewards(n_prev_actions=-1)

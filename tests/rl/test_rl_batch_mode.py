"""batch_mode="complete_episodes" (RLlib's): batches of whole episodes, single- and multi-agent, resumed exactly."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from cairn.rl import EnvRunner
from cairn.rl.algorithms.dqn import DQNConfig
from cairn.rl.algorithms.ppo import PPO, PPOConfig
from cairn.rl.env.multi_agent_env_runner import MultiAgentEnvRunner
from cairn.rl.examples.envs.classes.multi_agent import MultiAgentCartPole
from cairn.testing import assert_states_equal


def _config(env: Any = "CartPole-v1", num_envs: int = 2, batch: int = 64) -> PPOConfig:
    return (
        PPOConfig()
        .environment(env)
        .env_runners(num_envs_per_env_runner=num_envs, batch_mode="complete_episodes")
        .training(train_batch_size=batch, minibatch_size=32, num_epochs=1)
        .rl_module(model_config={"fcnet_hiddens": [8]})
        .debugging(seed=3)
    )


def _multi_config() -> PPOConfig:
    return (
        _config(MultiAgentCartPole, batch=40)
        .environment(MultiAgentCartPole, env_config={"num_agents": 2})
        .multi_agent(policies={"p0", "p1"}, policy_mapping={0: "p0", 1: "p1"})
    )


def _episode_ends(batch: dict[str, Any]) -> np.ndarray:
    return np.asarray(batch["terminateds"][:, 0]) | np.asarray(batch["truncateds"][:, 0])


@pytest.mark.parametrize("env", ["CartPole-v1", "Pendulum-v1"])
def test_a_single_agent_batch_holds_whole_episodes_of_at_least_the_fragment(env: str) -> None:
    runner = EnvRunner(_config(env))
    wanted = int(runner.config.rollout_length) * runner.num_slots
    for _ in range(3):
        batch = runner.sample_batches()["default_policy"]
        ends = _episode_ends(batch)
        assert batch["obs"].shape[1] == 1 and batch["obs"].shape[0] >= wanted
        assert ends[-1] and ends.sum() >= 1 and batch["bootstrap_vf"].tolist() == [0.0]
        report = runner.sample_report()
        assert report["env_steps"] >= batch["obs"].shape[0]  # steps of the dropped episodes count as sampled
        # The batch holds exactly the episodes the runner finished in the call, whole.
        starts = np.concatenate([[0], np.flatnonzero(ends)[:-1] + 1])
        episodes = sorted(
            (round(float(batch["rewards"][a : b + 1, 0].sum()), 6), int(b + 1 - a))
            for a, b in zip(starts, np.flatnonzero(ends), strict=True)
        )
        assert episodes == sorted((round(ret, 6), length) for ret, length, _ in report["episodes"])
        if env == "Pendulum-v1":  # its time limit truncates: bootstrapped from the final observation's value
            assert batch["truncateds"][ends].all() and np.all(batch["final_vf"][ends] != 0.0)


def test_a_multi_agent_batch_holds_whole_games_and_every_copy_waits_at_a_new_game() -> None:
    runner = MultiAgentEnvRunner(_multi_config())
    for _ in range(3):
        batches = runner.sample_batches()
        assert set(batches) == {"p0", "p1"}
        for batch in batches.values():
            assert _episode_ends(batch)[-1]
        assert all(not pending for pending in runner._pending) and all(not steps for steps in runner._agent_steps)
        assert runner.sample_report()["env_steps"] >= int(runner.config.rollout_length) * runner.num_envs


@pytest.mark.parametrize("multi_agent", [False, True])
def test_a_restored_runner_samples_the_same_whole_episodes(multi_agent: bool, tmp_path: Path) -> None:
    cls = MultiAgentEnvRunner if multi_agent else EnvRunner
    runner = cls(_multi_config() if multi_agent else _config())
    runner.sample_batches()
    path = runner.save_to_path(tmp_path / "runner")
    restored = cls.from_checkpoint(path)
    assert not restored.episodes_restarted
    for _ in range(2):
        a, b = runner.sample_batches(), restored.sample_batches()
        assert a.keys() == b.keys()
        for module_id in a:
            assert_states_equal(a[module_id], b[module_id])
    assert_states_equal(runner.get_state(), restored.get_state())


def test_ppo_trains_on_whole_episodes_single_and_multi_agent() -> None:
    for config in (_config(), _multi_config()):
        algo = PPO(config)
        try:
            result = algo.train()
            assert result["num_env_steps_sampled_lifetime"] >= 40
        finally:
            algo.stop()


def test_batch_modes_are_an_allow_list_and_off_policy_samplers_refuse_whole_episodes() -> None:
    with pytest.raises(ValueError, match=r"batch_mode must be one of \['truncate_episodes', 'complete_episodes'\]"):
        PPO(PPOConfig().environment("CartPole-v1").env_runners(batch_mode="episodes"))
    with pytest.raises(ValueError, match="complete_episodes"):
        DQNConfig().environment("CartPole-v1").env_runners(batch_mode="complete_episodes").build()

"""multi_agent(count_steps_by="agent_steps"): rollout_length counts agent steps, as in RLlib (issue 38)."""

from __future__ import annotations

import pytest

from cairn.rl.algorithms.ppo.ppo import PPO, PPOConfig
from cairn.rl.env.multi_agent_env_runner import MultiAgentEnvRunner
from cairn.rl.examples.envs.classes.multi_agent import MultiAgentCartPole


def _config(count_steps_by: str) -> PPOConfig:
    return (
        PPOConfig()
        .environment(MultiAgentCartPole, env_config={"num_agents": 4})
        .multi_agent(policies={"p0"}, policy_mapping={i: "p0" for i in range(4)}, count_steps_by=count_steps_by)
        .env_runners(rollout_fragment_length=20, num_envs_per_env_runner=4)
        .rl_module(model_config={"fcnet_hiddens": [8]})
    )


def test_agent_steps_bound_the_batch_sampler_and_the_episode_sampler() -> None:
    runner = MultiAgentEnvRunner(config=_config("agent_steps"))
    runner.sample_batches()
    # 4 copies x 4 agents act each env step while all are alive: 80 agent steps take 5 env steps per copy.
    assert runner._agent_steps_of_last_sample() == 80
    assert runner.num_env_steps_sampled_lifetime == 20
    episodes = runner.sample(num_timesteps=80)
    assert sum(e.agent_steps() for e in episodes) == 80 and [len(e) for e in episodes] == [5, 5, 5, 5]

    by_env = MultiAgentEnvRunner(config=_config("env_steps"))
    by_env.sample_batches()
    assert by_env.num_env_steps_sampled_lifetime == 80  # 20 env steps per copy
    assert by_env._agent_steps_of_last_sample() > 80


def test_an_unknown_count_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match=r"count_steps_by must be one of \['env_steps', 'agent_steps'\]"):
        PPO(_config("agents"))


def test_min_sample_timesteps_count_agent_steps_when_the_config_does() -> None:
    config = (
        _config("agent_steps")
        .training(minibatch_size=32, num_epochs=1)
        .reporting(min_sample_timesteps_per_iteration=150)
    )
    algo = PPO(config)
    try:
        result = algo.train()
    finally:
        algo.stop()
    # 80 agent steps per training step (5 env steps x 4 copies x 4 agents): two reach 150.
    assert result["num_training_step_calls_per_iteration"] == 2
    assert result["env_runners"]["num_env_steps_sampled"] == 2 * 20

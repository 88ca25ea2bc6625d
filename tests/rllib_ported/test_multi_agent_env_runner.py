"""RLlib's ``rllib/env/tests/test_multi_agent_env_runner.py`` on cairn (issue 38, item 2).

Same test names, cases and expected values; ``ray.rllib`` -> ``cairn.rl``; the mapping
lambda of ``_build_config`` as RLlib writes it (issue 39).
``MultiAgentEnvRunner.sample()`` returns RLlib's episodes, called bare too (the algorithm's
batches are ``sample_batches()``'s).
"""

from __future__ import annotations

from cairn.rl.algorithms.ppo.ppo import PPOConfig
from cairn.rl.env.multi_agent_env_runner import MultiAgentEnvRunner
from cairn.rl.examples.envs.classes.multi_agent import MultiAgentCartPole


def _build_config(num_agents: int = 2, num_policies: int = 2) -> PPOConfig:
    assert num_policies == 1 or num_agents == num_policies
    return (
        PPOConfig()
        .environment(MultiAgentCartPole, env_config={"num_agents": num_agents})
        .multi_agent(
            policies={f"p{i}" for i in range(num_policies)},
            policy_mapping_fn=(lambda aid, *args, **kwargs: f"p{aid}" if num_agents == num_policies else "p0"),
        )
    )


def test_sample_timesteps() -> None:
    env_runner = MultiAgentEnvRunner(config=_build_config())
    episodes = env_runner.sample(num_timesteps=10)
    assert sum(len(episode) for episode in episodes) == 10
    episodes = env_runner.sample(num_timesteps=200)
    assert len(episodes) >= 2
    assert episodes[0].is_terminated is True
    assert sum(len(e) for e in episodes) == 200
    assert sum(e.env_t for e in episodes) == 210
    for agent_eps in episodes[0].agent_episodes.values():
        assert "action_logp" in agent_eps.extra_model_outputs
        assert len(agent_eps.actions) == len(agent_eps.extra_model_outputs["action_logp"])
        assert len(agent_eps.actions) == len(agent_eps.extra_model_outputs["action_dist_inputs"])


def test_sample_episodes() -> None:
    env_runner = MultiAgentEnvRunner(config=_build_config())
    episodes = env_runner.sample(num_episodes=5)
    assert len(episodes) == 5
    assert all(eps.is_terminated for eps in episodes)
    for eps in episodes:
        for agent_eps in eps.agent_episodes.values():
            assert "action_logp" in agent_eps.extra_model_outputs
            assert len(agent_eps.actions) == len(agent_eps.extra_model_outputs["action_logp"])
            assert len(agent_eps.actions) == len(agent_eps.extra_model_outputs["action_dist_inputs"])
    episodes = env_runner.sample(num_timesteps=10)
    episodes += env_runner.sample(num_episodes=1)
    for eps in episodes:
        assert eps.env_t_started == 0
    episodes = env_runner.sample(num_episodes=1)
    episodes += env_runner.sample(num_timesteps=10)
    for eps in episodes:
        assert eps.env_t_started == 0


def test_counting_by_agent_steps() -> None:
    """Tests whether counting by agent_steps works."""
    config = _build_config(num_agents=4, num_policies=1)
    config.multi_agent(count_steps_by="agent_steps")
    config.env_runners(rollout_fragment_length=20, num_envs_per_env_runner=4)
    env_runner = MultiAgentEnvRunner(config=config)
    episodes = env_runner.sample()
    assert len(episodes) == 4
    assert all(e.agent_steps() == 20 for e in episodes)  # type: ignore[attr-defined]

"""RLlib's SingleAgentEnvRunner on cairn: what its ported tests (tests/rllib_ported) do not check."""

from __future__ import annotations

from cairn.rl.algorithms.algorithm_config import AlgorithmConfig
from cairn.rl.env.single_agent_env_runner import SingleAgentEnvRunner


def test_a_chunk_that_continues_an_episode_keeps_its_id() -> None:
    """RLlib's SingleAgentEpisode.cut(): the chunks of one episode share its id_, across sample() calls."""
    config = AlgorithmConfig().environment("CartPole-v1").env_runners(num_envs_per_env_runner=2)
    runner = SingleAgentEnvRunner(config=config)
    running = {e.env_index: e for e in runner.sample(num_timesteps=6, random_actions=True) if not e.is_done}
    assert len(running) == 2  # 3 random steps end no CartPole episode
    later = runner.sample(num_timesteps=6, random_actions=True)
    continued = {e.env_index: e for e in later if e.t_started > 0}
    assert {i: e.id_ for i, e in continued.items()} == {i: e.id_ for i, e in running.items()}
    assert len({e.id_ for e in runner.sample(num_episodes=3, random_actions=True)}) == 3

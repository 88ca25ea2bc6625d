"""The "multi:<env id>" environment: independent per-agent copies."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from cairn.rl import IndependentAgentsEnv
from cairn.rl.env.multi_agent_env import agent_ids, parse_env, resolve_policy_mapping


def test_copies_are_independent_and_reset_on_their_own() -> None:
    env = IndependentAgentsEnv("multi:CartPole-v1", 3)
    assert env.agents == ["agent_0", "agent_1", "agent_2"]
    obs, _ = env.reset(seed=10)
    single = gym.make("CartPole-v1")
    for i, agent in enumerate(env.agents):
        np.testing.assert_array_equal(obs[agent], single.reset(seed=10 + i)[0])
    ended: set[str] = set()
    for _ in range(200):
        # agent_0 always pushes left (ends soon), the others alternate.
        actions = {agent: 0 if agent == "agent_0" else len(ended) % 2 for agent in env.agents}
        obs, rewards, terminateds, truncateds, infos = env.step(actions)
        assert set(rewards) == set(env.agents)
        for agent in env.agents:
            if terminateds[agent] or truncateds[agent]:
                ended.add(agent)
                assert "final_obs" in infos[agent]
                assert env.observation_spaces[agent].contains(obs[agent])
    assert "agent_0" in ended
    with pytest.raises(KeyError, match="agent_1"):
        env.step({"agent_0": 0})
    env.close()


def test_ids_and_mapping() -> None:
    assert parse_env("multi:Pendulum-v1") == ("Pendulum-v1", True)
    assert parse_env("Pendulum-v1") == ("Pendulum-v1", False)
    assert agent_ids("CartPole-v1", 5) == ["default_agent"]
    with pytest.raises(ValueError, match="names no gymnasium"):
        parse_env("multi:")
    assert resolve_policy_mapping(["a", "b"], ["p"], None) == {"a": "p", "b": "p"}
    with pytest.raises(ValueError, match="no entry"):
        resolve_policy_mapping(["a", "b"], ["p", "q"], {"a": "p"})
    with pytest.raises(ValueError, match="valid component name"):
        resolve_policy_mapping(["a"], ["bad/id"], None)

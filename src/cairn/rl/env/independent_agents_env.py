"""``IndependentAgentsEnv``: ``num_agents`` independent copies of one gymnasium env with a dict API.

What ``env="multi:<env id>"`` is outside the runner (the runner steps the copies inside
its vector env); see :mod:`cairn.rl.env.multi_agent_env`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cairn.rl.env.multi_agent_env import MULTI_AGENT_PREFIX, agent_ids, check_env_id, make_env, parse_env

__all__ = ["IndependentAgentsEnv"]


class IndependentAgentsEnv:
    """``num_agents`` independent copies of one gymnasium env, one per agent, with a dict API.

    Every agent acts every step. When an agent's episode ends, its copy is
    reset at once (gymnasium's same-step autoreset): ``terminateds`` or
    ``truncateds`` is True for that agent, the observation returned is the
    first of its next episode, and ``infos[agent]["final_obs"]`` holds the last
    observation of the episode that ended.

    Args:
        env: A gymnasium id, with or without the ``"multi:"`` prefix.
        num_agents: Number of agents (``"agent_0"`` .. ``"agent_{n-1}"``).
        env_config: Keyword arguments for ``gymnasium.make``.
    """

    def __init__(self, env: str, num_agents: int, env_config: Mapping[str, Any] | None = None) -> None:
        check_env_id(env)
        env_id, _ = parse_env(env)
        self.agents = agent_ids(MULTI_AGENT_PREFIX + env_id, num_agents)
        self.envs = {agent: make_env(env_id, env_config or {}) for agent in self.agents}
        self.observation_spaces = {agent: e.observation_space for agent, e in self.envs.items()}
        self.action_spaces = {agent: e.action_space for agent, e in self.envs.items()}

    def reset(self, *, seed: int | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
        """Reset every copy; agent ``i``'s copy is seeded ``seed + i``."""
        observations: dict[str, Any] = {}
        infos: dict[str, Any] = {}
        for index, (agent, env) in enumerate(self.envs.items()):
            observations[agent], infos[agent] = env.reset(seed=None if seed is None else seed + index)
        return observations, infos

    def step(
        self, actions: Mapping[str, Any]
    ) -> tuple[dict[str, Any], dict[str, float], dict[str, bool], dict[str, bool], dict[str, Any]]:
        """Step every agent's copy with its action.

        Raises:
            KeyError: An agent has no action.
        """
        missing = [agent for agent in self.agents if agent not in actions]
        if missing:
            raise KeyError(f"No action for agents {missing}; every agent acts every step.")
        observations: dict[str, Any] = {}
        rewards: dict[str, float] = {}
        terminateds: dict[str, bool] = {}
        truncateds: dict[str, bool] = {}
        infos: dict[str, Any] = {}
        for agent, env in self.envs.items():
            obs, reward, terminated, truncated, info = env.step(actions[agent])
            rewards[agent], terminateds[agent], truncateds[agent] = float(reward), terminated, truncated
            if terminated or truncated:
                info = {"final_obs": obs, "final_info": info}
                obs, _ = env.reset()
            observations[agent], infos[agent] = obs, info
        return observations, rewards, terminateds, truncateds, infos

    def close(self) -> None:
        """Close every copy."""
        for env in self.envs.values():
            env.close()

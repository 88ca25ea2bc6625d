"""RLlib's multi-agent example environments (``ray.rllib.examples.envs.classes.multi_agent``).

``MultiAgentCartPole`` and ``MultiAgentPendulum`` are RLlib's
``make_multi_agent("CartPole-v1")`` / ``("Pendulum-v1")``: ``env_config["num_agents"]``
(default 1, as RLlib) independent copies of the gymnasium env, agent ``i`` acting in
copy ``i``. Every agent acts every step until its copy's episode ends; the episode
ends when every agent's has (RLlib's ``MultiEnv``). As in RLlib, a config names them
by class (``PPOConfig().environment(MultiAgentCartPole, env_config={"num_agents": 2})``),
which cairn records by reference (``"cairn.rl.examples.envs.classes.multi_agent:MultiAgentCartPole"``).

Agent ids are the ints ``0``, ``1``, ... as in RLlib (a mapping function gets the int,
``agent_id % 2`` works; checkpoints keep them ints). What differs from RLlib
(docs/rllib_parity.md): each copy is seeded from the episode's seed (RLlib: every copy
with the same seed), so that the agents do not play the same game.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import gymnasium as gym

from cairn.rl.env.multi_agent_env import ALL_AGENTS, MultiAgentEnv

__all__ = ["MultiAgentCartPole", "MultiAgentPendulum", "MultiAgentSingleEnvCopies"]


class MultiAgentSingleEnvCopies(MultiAgentEnv):
    """``num_agents`` copies of the gymnasium env :attr:`ENV_ID`, one per agent (RLlib's ``make_multi_agent``).

    Args:
        config: ``num_agents`` (default 1); the other keys go to ``gymnasium.make``.
    """

    ENV_ID: ClassVar[str] = ""
    """The gymnasium id each agent's copy is made from (set by each subclass)."""

    def __init__(self, config: Mapping[str, Any] | None = None) -> None:
        super().__init__()
        settings = dict(config or {})
        num_agents = int(settings.pop("num_agents", 1))
        if num_agents < 1:
            raise ValueError(f"{type(self).__name__} needs num_agents >= 1, got {num_agents}.")
        self.possible_agents: list[int] = list(range(num_agents))  # RLlib's ids: ints
        self.agents = list(self.possible_agents)
        self.envs = {agent: gym.make(self.ENV_ID, **settings) for agent in self.possible_agents}
        self.observation_spaces = {agent: env.observation_space for agent, env in self.envs.items()}
        self.action_spaces = {agent: env.action_space for agent, env in self.envs.items()}
        self._done: set[int] = set()

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[Any, Any], dict[Any, Any]]:
        """Reset every copy (each with its own seed drawn from the episode's), all agents act."""
        gym.Env.reset(self, seed=seed)
        self.agents = list(self.possible_agents)
        self._done = set()
        observations: dict[Any, Any] = {}
        infos: dict[Any, Any] = {}
        for agent, env in self.envs.items():
            observations[agent], infos[agent] = env.reset(seed=int(self.np_random.integers(2**31)), options=options)
        return observations, infos

    def step(  # type: ignore[override]  # dicts of rewards and flags, as MultiAgentEnv.step
        self, action_dict: dict[Any, Any]
    ) -> tuple[dict[Any, Any], dict[Any, Any], dict[Any, Any], dict[Any, Any], dict[Any, Any]]:
        """Step the copies of the agents that act; an agent whose copy's episode ended stops acting."""
        observations: dict[Any, Any] = {}
        rewards: dict[Any, Any] = {}
        terminateds: dict[Any, Any] = {}
        truncateds: dict[Any, Any] = {}
        infos: dict[Any, Any] = {}
        for agent, action in action_dict.items():
            obs, reward, terminated, truncated, info = self.envs[agent].step(action)
            observations[agent], rewards[agent], infos[agent] = obs, float(reward), info
            terminateds[agent], truncateds[agent] = bool(terminated), bool(truncated)
            if terminated or truncated:
                self._done.add(agent)
                self.agents.remove(agent)
        # RLlib: the episode ends when every copy's has; "__all__" says how the last one ended.
        all_done = len(self._done) == len(self.possible_agents)
        terminateds[ALL_AGENTS] = all_done and not any(truncateds.values())
        truncateds[ALL_AGENTS] = all_done and any(truncateds.values())
        return observations, rewards, terminateds, truncateds, infos

    def close(self) -> None:
        """Close every copy."""
        for env in self.envs.values():
            env.close()


class MultiAgentCartPole(MultiAgentSingleEnvCopies):
    """RLlib's ``MultiAgentCartPole``: one ``CartPole-v1`` per agent."""

    ENV_ID = "CartPole-v1"


class MultiAgentPendulum(MultiAgentSingleEnvCopies):
    """RLlib's ``MultiAgentPendulum``: one ``Pendulum-v1`` per agent."""

    ENV_ID = "Pendulum-v1"

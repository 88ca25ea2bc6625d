"""Agents, policies and the ``multi:<env id>`` multi-agent environment.

``env="multi:CartPole-v1"`` with ``num_agents=n`` is a multi-agent
environment made of ``n`` independent copies of ``CartPole-v1``, one per
agent (``"agent_0"`` .. ``"agent_{n-1}"``). Each agent acts in its own copy
every step and its episodes end and restart on their own, so an env runner
runs such an environment as ``n`` sub-environments of its vector env, and
each agent's experience goes to the module its policy mapping names.
A plain gymnasium id is a single-agent environment whose one agent is
``"default_agent"``.

:class:`IndependentAgentsEnv` is the same environment with a dict API
(agent id -> value), for stepping it by hand; the env runner steps exactly
these per-agent copies inside its vector env (copy ``e``, agent ``i`` is
sub-environment ``e * n + i``, seeded ``seed + e * n + i``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import gymnasium as gym
import numpy as np

from cairn.rl.algorithms.algorithm_config import (
    MULTI_AGENT_PREFIX,
    AlgorithmConfig,
    check_env_config,
    check_env_id,
)
from cairn.rl.core.rl_module.rl_module import RLModuleSpec
from cairn.rl.utils._util import check_component_name

__all__ = [
    "DEFAULT_AGENT_ID",
    "MULTI_AGENT_PREFIX",
    "IndependentAgentsEnv",
    "agent_ids",
    "build_module_specs",
    "check_env_config",
    "check_env_id",
    "parse_env",
    "resolve_policy_mapping",
]

DEFAULT_AGENT_ID = "default_agent"
"""The agent id of a single-agent environment (RLlib's name)."""


def parse_env(env: str) -> tuple[str, bool]:
    """Split ``"multi:CartPole-v1"`` into ``("CartPole-v1", True)``."""
    if env.startswith(MULTI_AGENT_PREFIX):
        inner = env[len(MULTI_AGENT_PREFIX) :]
        if not inner:
            raise ValueError(f"env={env!r} names no gymnasium environment after 'multi:'.")
        return inner, True
    return env, False


def agent_ids(env: str, num_agents: int) -> list[str]:
    """The agent ids of ``env``: ``["default_agent"]`` or ``["agent_0", ...]``."""
    _, multi = parse_env(env)
    if not multi:
        return [DEFAULT_AGENT_ID]
    if num_agents < 1:
        raise ValueError(f"num_agents must be at least 1 for a multi-agent env, got {num_agents}.")
    return [f"agent_{i}" for i in range(num_agents)]


def resolve_policy_mapping(
    agents: Sequence[str], policies: Sequence[str], policy_mapping: Mapping[str, str] | None
) -> dict[str, str]:
    """Agent id -> module id, checked.

    With one policy and no mapping, every agent maps to it.

    Raises:
        ValueError: No policies, an invalid policy id, an agent without a policy,
            or a mapping to an unknown policy.
    """
    if not policies:
        raise ValueError("policies must name at least one module id.")
    for policy in policies:
        check_component_name(policy, what="Policy id")
    if policy_mapping is None:
        if len(policies) != 1:
            raise ValueError(
                f"policies={list(policies)} has several module ids, so policy_mapping must say "
                f"which one each agent of {list(agents)} uses."
            )
        return {agent: policies[0] for agent in agents}
    mapping: dict[str, str] = {}
    for agent in agents:
        if agent not in policy_mapping:
            raise ValueError(f"policy_mapping has no entry for agent {agent!r}; the agents are {list(agents)}.")
        module_id = policy_mapping[agent]
        if module_id not in policies:
            raise ValueError(
                f"policy_mapping maps {agent!r} to {module_id!r}, which is not in policies={list(policies)}."
            )
        mapping[agent] = module_id
    return mapping


def make_env(env: str, env_config: Mapping[str, Any]) -> gym.Env[Any, Any]:
    """Build one (single-agent) gymnasium environment of ``env`` (``multi:`` stripped).

    ``env`` comes from a config that :func:`check_env_id` accepted in the
    program that built it; remote env runners (Ray workers) make it here
    without checking again, so that a ``"mymod:Env-v0"`` id the driver had
    imported lets each worker import ``mymod`` to register the environment.
    """
    env_id, _ = parse_env(env)
    return gym.make(env_id, **dict(env_config))


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


def build_module_specs(
    config: AlgorithmConfig, observation_space: gym.Space[Any], action_space: gym.Space[Any]
) -> dict[str, RLModuleSpec]:
    """Module id -> spec for every policy of ``config``, each with its own init seed."""
    specs: dict[str, RLModuleSpec] = {}
    for index, module_id in enumerate(config.policies):
        seed = int(np.random.SeedSequence([config.seed, 7919, index]).generate_state(1)[0])
        specs[module_id] = RLModuleSpec(observation_space, action_space, dict(config.model_config), seed)
    return specs

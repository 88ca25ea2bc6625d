"""Agents, policies and the ``multi:<env id>`` multi-agent environment.

``env="multi:CartPole-v1"`` with ``num_agents=n`` is a multi-agent
environment made of ``n`` independent copies of ``CartPole-v1``, one per
agent (``"agent_0"`` .. ``"agent_{n-1}"``). Each agent acts in its own copy
every step and its episodes end and restart on their own, so an env runner
runs such an environment as ``n`` sub-environments of its vector env, and
each agent's experience goes to the module its policy mapping names.
A plain gymnasium id is a single-agent environment whose one agent is
``"default_agent"``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np

from cairn.rl._util import COMPONENT_NAME_RE
from cairn.rl.rl_module import RLModuleSpec

if TYPE_CHECKING:
    from cairn.rl.algorithm import AlgorithmConfig

__all__ = [
    "DEFAULT_AGENT_ID",
    "MULTI_AGENT_PREFIX",
    "agent_ids",
    "build_module_specs",
    "parse_env",
    "resolve_policy_mapping",
]

DEFAULT_AGENT_ID = "default_agent"
"""The agent id of a single-agent environment (RLlib's name)."""

MULTI_AGENT_PREFIX = "multi:"
"""Prefix of an env id that asks for independent copies, one per agent."""


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
        if not COMPONENT_NAME_RE.match(policy):
            raise ValueError(f"Policy id {policy!r} is not a valid component name (letters, digits, '_', '-', '.').")
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
    """Build one (single-agent) gymnasium environment of ``env`` (``multi:`` stripped)."""
    env_id, _ = parse_env(env)
    return gym.make(env_id, **dict(env_config))


def build_module_specs(
    config: AlgorithmConfig, observation_space: gym.Space[Any], action_space: gym.Space[Any]
) -> dict[str, RLModuleSpec]:
    """Module id -> spec for every policy of ``config``, each with its own init seed."""
    specs: dict[str, RLModuleSpec] = {}
    for index, module_id in enumerate(config.policies):
        seed = int(np.random.SeedSequence([config.seed, 7919, index]).generate_state(1)[0])
        specs[module_id] = RLModuleSpec(observation_space, action_space, dict(config.model_config), seed)
    return specs

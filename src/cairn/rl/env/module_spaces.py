"""Which spaces each module of a runner gets: agent ids checked, module spaces inferred, module specs built.

A module gets the spaces of the agents mapped to it (RLlib's space inference: a dummy episode's
agents through the mapping function), refused when agents of other spaces share it; the runners
build their modules' specs from those spaces (:func:`build_module_specs`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import gymnasium as gym

from cairn.rl.config.algorithm_config import AlgorithmConfig
from cairn.rl.core.rl_module.multi_rl_module import module_specs_from_config
from cairn.rl.core.rl_module.rl_module import RLModuleSpec
from cairn.rl.env.multi_agent_env import ALL_AGENTS, AgentID, EpisodeInfo, Spaces

__all__ = ["build_module_specs", "check_agent_ids", "infer_module_spaces", "space_mismatch"]


def check_agent_ids(agents: Sequence[Any], *, env: str) -> list[AgentID]:
    """``agents`` as a list, each checked to be an :data:`AgentID`.

    Raises:
        ValueError: An id that is no ``str``/``int`` (a ``bool`` is refused too:
            ``True == 1`` would make two agents one), ``"__all__"``, or a repeated id.
    """
    checked: list[AgentID] = []
    for agent in agents:
        if isinstance(agent, bool) or not isinstance(agent, str | int):
            raise ValueError(
                f"env={env!r} has the agent id {agent!r} ({type(agent).__qualname__}): cairn takes str or int agent "
                "ids, which checkpoints keep exactly (a tuple or other hashable would not come back as it was). "
                "Give the env str or int ids, e.g. '_'.join(map(str, agent)) for a tuple."
            )
        if agent == ALL_AGENTS:
            raise ValueError(f"env={env!r} has an agent named {ALL_AGENTS!r}, the key that ends a whole episode.")
        checked.append(agent)
    if len({(type(a), a) for a in checked}) != len(checked):
        raise ValueError(f"env={env!r} lists an agent id twice in possible_agents: {checked}.")
    return checked


def space_mismatch(agent: AgentID, agent_spaces: Spaces, other: AgentID | None, module_id: str, spaces: Spaces) -> str:
    """Why ``agent`` (with ``agent_spaces``) cannot act with ``module_id`` (whose spaces are ``spaces``).

    ``other`` is the agent that gave the module its spaces, when one did.
    """
    mine = f"agent {agent!r} ({agent_spaces[0]}, {agent_spaces[1]})"
    if other is not None:
        what = f"{mine} and agent {other!r} ({spaces[0]}, {spaces[1]}) both map to module {module_id!r}"
    else:
        what = f"{mine} is mapped to module {module_id!r}, whose spaces are ({spaces[0]}, {spaces[1]})"
    return (
        f"{what}, but one module has one observation space and one action space. Map agents with other spaces "
        "to modules of their own (policy_mapping / policy_mapping_fn), or give the module's spaces in its "
        "RLModuleSpec if it should serve these agents."
    )


def infer_module_spaces(
    config: AlgorithmConfig,
    agent_spaces: Mapping[Any, Spaces],
    mapping_fn: Callable[[Any, EpisodeInfo], str],
) -> dict[str, Spaces]:
    """Module id -> the spaces of the agents mapped to it (RLlib's ``infer_spaces``).

    When all agents share one pair of spaces, every module gets it and
    ``mapping_fn`` is not called. Otherwise each possible agent is mapped once
    with ``mapping_fn`` and a dummy episode (``id_="space-inference"``, seed 0;
    RLlib calls its mapping function with a dummy episode too), and each module
    gets the spaces of the agents mapped to it. A module no agent was mapped to
    (a mapping that picks modules at random per episode) is left out: the
    runner gives it the first agent's spaces unless its RLModuleSpec gives
    them. Episodes check every mapping again when it is made
    (:func:`space_mismatch`), so an agent of other spaces is refused then.

    Raises:
        ValueError: Two agents with other spaces map to one module, or an agent
            maps to no module of ``config.policies``.
    """
    policies = tuple(config.policies)
    pairs = list(agent_spaces.values())
    if all(spaces == pairs[0] for spaces in pairs):
        return dict.fromkeys(policies, pairs[0])
    episode = EpisodeInfo(id_="space-inference", seed=0, env_index=0, worker_index=0, module_ids=policies)
    found: dict[str, tuple[AgentID, Spaces]] = {}
    for agent, spaces in agent_spaces.items():
        module_id = mapping_fn(agent, episode)
        if module_id not in policies:
            raise ValueError(
                f"env={config.env!r}: the policy mapping maps agent {agent!r} to {module_id!r}, which is not one of "
                f"the modules {list(policies)}."
            )
        if module_id in found and found[module_id][1] != spaces:
            other, other_spaces = found[module_id]
            raise ValueError(f"env={config.env!r}: " + space_mismatch(agent, spaces, other, module_id, other_spaces))
        found.setdefault(module_id, (agent, spaces))
    return {module_id: spaces for module_id, (_, spaces) in found.items()}


def build_module_specs(
    config: AlgorithmConfig,
    observation_space: gym.Space[Any],
    action_space: gym.Space[Any],
    *,
    module_spaces: Mapping[str, Spaces] | None = None,
) -> dict[str, RLModuleSpec]:
    """Module id -> spec for every policy of ``config`` (see :func:`module_specs_from_config`).

    ``module_spaces`` gives a module its own spaces (agents with different
    spaces, :func:`infer_module_spaces`); the others get ``observation_space``
    and ``action_space``. Spaces a module's RLModuleSpec gives always win.
    """
    specs = module_specs_from_config(config, observation_space, action_space)
    for module_id, (obs_space, act_space) in (module_spaces or {}).items():
        if module_id in specs:
            # The same spec with other defaults: seeds stay those of the module's index.
            specs[module_id] = module_specs_from_config(config, obs_space, act_space)[module_id]
    return specs

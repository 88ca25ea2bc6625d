"""The connector pipelines of a multi-agent env runner: one ``env_to_module`` / ``module_to_env`` pair per module.

:class:`MultiAgentRunnerPipelines` builds them for
:class:`~cairn.rl.env.multi_agent_env_runner.MultiAgentEnvRunner` from the spaces of the
agents mapped to each module (:mod:`~cairn.rl.env.connector_building` builds each pair).
The runner's attributes it reads are set by the runner's ``__init__`` (declared below for the
type checker).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import gymnasium as gym

from cairn.rl.config.algorithm_config import AlgorithmConfig
from cairn.rl.connectors.connectors import ConnectorPipeline
from cairn.rl.core.rl_module.multi_rl_module import MultiRLModule
from cairn.rl.core.rl_module.rl_module import RLModuleSpec
from cairn.rl.env.connector_building import build_env_to_module, build_module_to_env, check_learner_connector
from cairn.rl.env.module_pipelines import ModulePipelines
from cairn.rl.env.module_spaces import build_module_specs
from cairn.rl.env.multi_agent_env import AgentID, EpisodeInfo, MultiAgentEnv, Spaces
from cairn.rl.env.multi_agent_runner_state import _holds
from cairn.rl.env.pretrained_connectors import restore_module_pretrained_connectors

__all__ = ["MultiAgentRunnerPipelines"]


class MultiAgentRunnerPipelines:
    """The per-module connector pipelines of :class:`~cairn.rl.env.multi_agent_env_runner.MultiAgentEnvRunner`."""

    # What the runner's __init__ sets, and building the pipelines reads and writes.
    envs: list[MultiAgentEnv]
    possible_agents: list[AgentID]
    env_observation_space: gym.Space[Any]
    observation_space: gym.Space[Any]
    action_space: gym.Space[Any]
    env_to_module: ModulePipelines
    module_to_env: ModulePipelines
    _mapping_fn: Callable[[Any, EpisodeInfo], str]
    _check_spaces: Callable[[AgentID, str], None]

    def _build_connectors(
        self,
        config: AlgorithmConfig,
        observation_space: gym.Space[Any],
        action_space: gym.Space[Any],
        *,
        module_spaces: Mapping[str, Spaces] | None = None,
    ) -> dict[str, RLModuleSpec]:
        """One ``env_to_module`` / ``module_to_env`` pipeline pair per module; the specs of their output spaces.

        Each module's pipelines are built from the spaces of the agents mapped to it
        (``module_spaces``; the first agent's, ``observation_space`` and ``action_space``,
        for a module no agent reached; a module's RLModuleSpec spaces win) by the
        connectors' builders: the config's factories (``FlattenObservations``,
        ``FrameStackingEnvToModule``, your own pieces), then the observation filter and
        action clipping. The module is built for its pipeline's output space, and its
        pipeline starts from its ``load_state_path`` checkpoint's connector state.
        """
        env_specs = build_module_specs(config, observation_space, action_space, module_spaces=module_spaces)
        agents = self._module_agents(config, self._mapping_fn)
        self.env_observation_space, self.action_space = observation_space, action_space
        self.env_to_module = ModulePipelines()
        self.module_to_env = ModulePipelines()
        self._module_env_spaces: dict[str, Spaces] = {}
        """Module id -> the (observation, action) spaces its agents give (its pipeline's input)."""
        specs: dict[str, RLModuleSpec] = {}
        for module_id, env_spec in env_specs.items():
            assert env_spec.observation_space is not None and env_spec.action_space is not None
            env_spaces = (env_spec.observation_space, env_spec.action_space)
            to_module, to_env, out = self._module_pipelines(
                config, env_spaces, agents.get(module_id), module=(module_id, env_spec.module_class)
            )
            restore_module_pretrained_connectors(to_module, config, module_id)  # load_state_path's filter
            self._register_pipelines(module_id, env_spaces, to_module, to_env)
            specs[module_id] = replace(env_spec, observation_space=out)
        first = self.possible_agents[0]
        first_module = next((m for m, listed in agents.items() if _holds(listed, first) and m in specs), "")
        first_out = specs[first_module].observation_space if first_module else None
        if first_out is not None and self._module_env_spaces[first_module] == (observation_space, action_space):
            self.observation_space = first_out
        else:  # the module side of the first agent's spaces, what Algorithm.add_module gives a spec without spaces
            # Its module, or the one class of all modules when the mapping is not known yet (no connectors).
            classes = {spec.module_class for spec in env_specs.values()}
            first_class = env_specs[first_module].module_class if first_module else None
            if first_class is None and len(classes) == 1:
                first_class = next(iter(classes))
            self.observation_space = self._module_pipelines(
                config, (observation_space, action_space), [first], module=(first_module, first_class)
            )[2]
        # A fixed mapping is known now: an agent mapped to a module of other spaces (a recorded spec's) is
        # refused when the runner is built, not at its first action.
        static = dict(config.policy_mapping or {}) if config.policy_mapping_fn is None else {}
        if config.policy_mapping_fn is None and config.policy_mapping is None and len(specs) == 1:
            static = dict.fromkeys(self.possible_agents, next(iter(specs)))
        for agent, module_id in static.items():
            if module_id in self._module_env_spaces and _holds(self.possible_agents, agent):
                self._check_spaces(agent, module_id)
        return specs

    def _module_pipelines(
        self,
        config: AlgorithmConfig,
        env_spaces: Spaces,
        agents: Sequence[AgentID] | None,
        *,
        module: tuple[str, Any] | None = None,
    ) -> tuple[ConnectorPipeline, ConnectorPipeline, gym.Space[Any]]:
        """``(env_to_module, module_to_env, output space)`` for agents of ``env_spaces``; changes nothing.

        ``module``: ``(module id, class)`` of the module the pipelines feed; when its class takes
        Dict/Tuple observations unflattened (``takes_nested_observations``), the pipeline may output them.
        """
        obs_space, act_space = env_spaces
        env = self.envs[0]
        nested = None
        if module is not None and getattr(module[1], "takes_nested_observations", False) is True:
            nested = f"module {module[0]!r} ({module[1].__qualname__})"
        to_module, out = build_env_to_module(
            config, obs_space, act_space, env=env, multi_agent=True, agents=agents, nested_module=nested
        )
        to_env = build_module_to_env(config, obs_space, act_space, env=env, multi_agent=True)
        check_learner_connector(config, to_module, out, act_space)
        return to_module, to_env, out

    def _register_pipelines(
        self, module_id: str, env_spaces: Spaces, to_module: ConnectorPipeline, to_env: ConnectorPipeline
    ) -> None:
        self.env_to_module.add(module_id, to_module)
        self.module_to_env.add(module_id, to_env)
        self._module_env_spaces[module_id] = env_spaces

    def _module_agents(
        self, config: AlgorithmConfig, mapping_fn: Callable[[Any, EpisodeInfo], str]
    ) -> dict[str, list[AgentID]]:
        """Module id -> the possible agents the mapping sends to it in a dummy episode (as space inference does).

        Only connector factories care (``FlattenObservations(agent_ids=...)``): without
        them no mapping function is called (runs without connectors stay as they were).
        """
        if config.env_to_module_connector is None:
            return {}
        episode = EpisodeInfo(
            id_="space-inference", seed=0, env_index=0, worker_index=0, module_ids=tuple(config.policies)
        )
        out: dict[str, list[AgentID]] = {}
        for agent in self.possible_agents:
            out.setdefault(str(mapping_fn(agent, episode)), []).append(agent)
        return out

    def _episode_api_pipelines(
        self, config: AlgorithmConfig, module: MultiRLModule
    ) -> tuple[ModulePipelines, ModulePipelines]:
        """New ``(env_to_module, module_to_env)`` pipelines for RLlib's ``sample()``, one pair per module of
        ``module``: built as the batch sampler's are (same pieces, spaces and ``load_state_path`` state), but
        their own, so that the two samplers' env copies share no frame stacks or slots."""
        agents = self._module_agents(config, self._mapping_fn)
        to_module_pipelines, to_env_pipelines = ModulePipelines(), ModulePipelines()
        for module_id in module:
            env_spaces = self._module_env_spaces.get(module_id)
            if env_spaces is None:  # a module added without spaces of its own: its agents give the env's
                env_spaces = (self.env_observation_space, self.action_space)
            to_module, to_env, _ = self._module_pipelines(
                config, env_spaces, agents.get(module_id), module=(module_id, type(module[module_id]))
            )
            restore_module_pretrained_connectors(to_module, config, module_id)
            to_module_pipelines.add(module_id, to_module)
            to_env_pipelines.add(module_id, to_env)
        return to_module_pipelines, to_env_pipelines

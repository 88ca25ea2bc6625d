"""Adding and removing modules on an env runner, in two phases for a group of runners.

:class:`EnvRunnerModules` gives :class:`~cairn.rl.env.env_runner.EnvRunner` ``add_module`` and
the removal a group applies in two phases (``prepare_remove_module`` on every runner, then
``apply_remove_module`` on all, or ``discard_remove_module`` when one refused);
:class:`MultiAgentRunnerModules` adds what the multi-agent runner changes with a module: its
pipelines, the agent-to-module mapping, and the agents of episodes in flight that are re-mapped.
The runners' attributes these read are set by the runners' ``__init__`` (declared below for the
type checker).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import gymnasium as gym

from cairn.rl.config.algorithm_config import AlgorithmConfig
from cairn.rl.connectors.connectors import ConnectorPipeline
from cairn.rl.core.rl_module.multi_rl_module import MultiRLModule
from cairn.rl.core.rl_module.rl_module import RLModuleSpec
from cairn.rl.core.rl_module.stateful import initial_state
from cairn.rl.env.module_pipelines import ModulePipelines
from cairn.rl.env.multi_agent_env import AgentID, EpisodeInfo, Spaces

if TYPE_CHECKING:
    import numpy.typing as npt
    import torch

    from cairn.rl.env.multi_agent_env_runner import _Trajectory
    from cairn.rl.env.multi_agent_game_hooks import GameEpisodes

__all__ = ["EnvRunnerModules", "ModuleRemoval", "MultiAgentRunnerModules"]


@dataclass(frozen=True)
class ModuleRemoval:
    """A removal of a module that an env runner checked and can apply without refusing.

    :meth:`EnvRunner.prepare_remove_module` makes it, :meth:`EnvRunner.apply_remove_module`
    applies it; a group prepares on every runner before it applies on any.

    Attributes:
        module_id: The module to drop.
        config: The algorithm's config without it.
        remapped: ``(env copy, agent) -> new module`` of the agents of episodes in
            flight that act with ``module_id`` (multi-agent runners).
        mapping_fn: The mapping function the runner takes (multi-agent runners).
    """

    module_id: str
    config: AlgorithmConfig
    remapped: dict[tuple[int, Any], str] = field(default_factory=dict)
    mapping_fn: Any = None


class EnvRunnerModules:
    """``add_module`` and the two-phase module removal of :class:`~cairn.rl.env.env_runner.EnvRunner`."""

    # What the runner's __init__ (and _init_sampling) sets, and adding or removing a module changes.
    config: AlgorithmConfig
    module: MultiRLModule
    module_specs: dict[str, RLModuleSpec]
    policy_mapping: dict[Any, str]
    _module_slots: dict[str, npt.NDArray[Any]]
    _recent_module_returns: dict[str, deque[float]]

    def add_module(self, module_id: str, spec: RLModuleSpec, *, config: AlgorithmConfig) -> None:
        """Add an inference copy of a new module (weights follow with the next :meth:`set_weights`).

        Args:
            module_id: The new module's id.
            spec: Its complete spec (class and spaces given).
            config: The algorithm's config with the module added (its ``policies``).
        """
        self.module.add_module(module_id, spec.build())
        self.module.eval()
        self.module_specs[module_id] = spec
        self._recent_module_returns.setdefault(module_id, deque(maxlen=int(self.config.episode_return_window)))
        self.config = config

    _prepared_removal: ModuleRemoval | None = None
    """What :meth:`prepare_remove_module` checked, until :meth:`apply_remove_module`."""

    def remove_module(self, module_id: str, *, config: AlgorithmConfig) -> None:
        """Drop the inference copy of ``module_id`` (:meth:`prepare_remove_module`, then apply it).

        Raises:
            ValueError: Agents of this runner's environments still act with it (nothing is changed).
        """
        self.prepare_remove_module(module_id, config=config)
        self.apply_remove_module()

    def prepare_remove_module(self, module_id: str, *, config: AlgorithmConfig) -> None:
        """Check that removing ``module_id`` with ``config`` is possible here, changing nothing.

        The runner keeps what the removal would do until :meth:`apply_remove_module`
        (or the next prepare). A group of runners prepares on every runner first, so
        that one runner's refusal leaves them all as they were.

        Raises:
            ValueError: Agents of this runner's environments still act with it.
        """
        self._prepared_removal = None
        self._prepared_removal = self._plan_removal(module_id, config)

    def apply_remove_module(self) -> None:
        """Apply the removal :meth:`prepare_remove_module` checked.

        Raises:
            RuntimeError: Nothing was prepared.
        """
        removal, self._prepared_removal = self._prepared_removal, None
        if removal is None:
            raise RuntimeError("apply_remove_module() without prepare_remove_module(): there is nothing to remove.")
        self._apply_removal(removal)

    def discard_remove_module(self) -> None:
        """Forget a removal :meth:`prepare_remove_module` checked (another runner refused it)."""
        self._prepared_removal = None

    def _plan_removal(self, module_id: str, config: AlgorithmConfig) -> ModuleRemoval:
        """The removal of ``module_id``, or ``ValueError`` if this runner refuses it; changes nothing."""
        if module_id in self._module_slots:
            agents = sorted({agent for agent, m in self.policy_mapping.items() if m == module_id})
            raise ValueError(
                f"Module {module_id!r} cannot be removed: agents {agents} act with it. Map them to another "
                "module first (new_agent_to_module_mapping_fn / policy_mapping)."
            )
        return ModuleRemoval(module_id, config)

    def _apply_removal(self, removal: ModuleRemoval) -> None:
        """Forget the module (inference copy, spec, return window) once no agent acts with it; take the config."""
        self.module.remove_module(removal.module_id)
        self.module_specs.pop(removal.module_id, None)
        self._recent_module_returns.pop(removal.module_id, None)
        self.config = removal.config


class MultiAgentRunnerModules(EnvRunnerModules):
    """What :class:`~cairn.rl.env.multi_agent_env_runner.MultiAgentEnvRunner` changes with a module."""

    # What the runner's __init__ sets, and adding or removing a module changes (see MultiAgentEnvRunner).
    env_to_module: ModulePipelines
    module_to_env: ModulePipelines
    _agent_spaces: dict[AgentID, Spaces]
    _initial_states: dict[str, dict[str, torch.Tensor]]
    _mapping_fn: Callable[[Any, EpisodeInfo], str]
    _mappings: list[dict[AgentID, str]]
    _pending: list[dict[AgentID, dict[str, Any]]]
    _agent_states: dict[tuple[int, AgentID], dict[str, torch.Tensor]]
    _force_starts: set[tuple[int, AgentID]]
    _open: dict[tuple[int, AgentID], _Trajectory]
    _closed: list[_Trajectory]
    _games: GameEpisodes
    _resolve_mapping: Callable[[AlgorithmConfig], Callable[[Any, EpisodeInfo], str]]
    _static_mapping: Callable[[], dict[Any, str]]
    _register_pipelines: Callable[[str, Spaces, ConnectorPipeline, ConnectorPipeline], None]
    _module_agents: Callable[[AlgorithmConfig, Callable[[Any, EpisodeInfo], str]], dict[str, list[AgentID]]]
    # (config, env_spaces, agents, *, module) -> (env_to_module, module_to_env, output space)
    _module_pipelines: Callable[..., tuple[ConnectorPipeline, ConnectorPipeline, gym.Space[Any]]]
    _map_agent: Callable[[int, AgentID, Callable[[Any, EpisodeInfo], str], tuple[str, ...]], str]

    def add_module(self, module_id: str, spec: RLModuleSpec, *, config: AlgorithmConfig) -> None:
        """As :meth:`EnvRunner.add_module`; new episodes map agents with ``config``'s ``policy_mapping_fn``.

        Episodes in flight keep the mapping they have.
        """
        mapping_fn = self._resolve_mapping(config)
        env_spaces, (to_module, to_env, _) = self._pipelines_for_spec(config, module_id, spec, mapping_fn)
        super().add_module(module_id, spec, config=config)
        state = initial_state(self.module[module_id], module_id)
        if state:
            self._initial_states[module_id] = state
        self._register_pipelines(module_id, env_spaces, to_module, to_env)
        self._mapping_fn = mapping_fn
        self.policy_mapping = self._static_mapping()

    def _pipelines_for_spec(
        self,
        config: AlgorithmConfig,
        module_id: str,
        spec: RLModuleSpec,
        mapping_fn: Callable[[Any, EpisodeInfo], str],
    ) -> tuple[Spaces, tuple[ConnectorPipeline, ConnectorPipeline, gym.Space[Any]]]:
        """The agent-side spaces and pipelines of an added module whose (complete) spec gives its module-side spaces.

        The spec's observation space is what the module takes (a flattened or stacked
        one when the config has such connectors): the agent-side spaces are the first
        of the agents' spaces (the first agent's first), then the spec's own, whose
        pipeline outputs the spec's observation space.

        Raises:
            ValueError: No agent's spaces give the spec's spaces through the pipelines.
        """
        agents = self._module_agents(config, mapping_fn).get(module_id)
        candidates: list[tuple[Any, Any]] = []
        for pair in [*self._agent_spaces.values(), (spec.observation_space, spec.action_space)]:
            if pair not in candidates:  # spaces are compared, not hashed
                candidates.append(pair)
        for obs_space, act_space in candidates:
            if obs_space is None or act_space is None or act_space != spec.action_space:
                continue
            built = self._module_pipelines(
                config, (obs_space, act_space), agents, module=(module_id, spec.module_class)
            )
            if built[2] == spec.observation_space:
                return (obs_space, act_space), built
        raise ValueError(
            f"Module {module_id!r}: its spec's spaces ({spec.observation_space}, {spec.action_space}) are no agent's "
            f"spaces after the env_to_module connectors of env={self.config.env!r}. Give the spec the spaces its "
            "agents' observations have after the connectors (leave them out for the first agent's)."
        )

    def _plan_removal(self, module_id: str, config: AlgorithmConfig) -> ModuleRemoval:
        """Drop the inference copy of ``module_id`` at once, also while episodes that use it run.

        New episodes map agents with ``config``'s ``policy_mapping_fn``. Agents
        of episodes in flight that act with ``module_id`` are re-mapped now with
        that function (the same episode seed as for a new mapping, so a restored
        runner agrees) and act with their new module from their next action on.
        Their open transitions and the rows of their trajectories not yet
        returned by :meth:`sample_batches` were collected with ``module_id`` and are
        dropped: they would train a module that no longer exists, and the new
        module did not choose those actions (PPO needs its own log-probabilities).
        Their episode returns keep counting: an agent's return covers its whole
        episode and is reported under the module it ends with.

        The new mappings are computed here, before anything changes (the
        removal applies exactly them, even for a mapping function that draws
        at random).

        Raises:
            ValueError: ``config``'s mapping maps an agent of an episode in
                flight to ``module_id`` or to no module (nothing is changed then;
                pass a mapping that leaves ``module_id`` out).
        """
        mapping_fn = self._resolve_mapping(config)
        remaining = tuple(m for m in self.module if m != module_id)
        remapped: dict[tuple[int, AgentID], str] = {}
        for e, mapping in enumerate(self._mappings):
            for agent, m in mapping.items():
                if m == module_id:
                    try:
                        remapped[(e, agent)] = self._map_agent(e, agent, mapping_fn, remaining)
                    except ValueError as error:
                        raise ValueError(
                            f"Module {module_id!r} cannot be removed: agent {agent!r} of the episode in flight in env "
                            f"copy {e} acts with it and must be re-mapped, but {error} Pass a "
                            "new_agent_to_module_mapping_fn that maps agents to the remaining modules."
                        ) from error
        return ModuleRemoval(module_id, config, remapped=remapped, mapping_fn=mapping_fn)

    def _apply_removal(self, removal: ModuleRemoval) -> None:
        """Re-map the agents as planned, drop the removed module's open rows, then forget the module."""
        module_id = removal.module_id
        for (e, agent), new_module in removal.remapped.items():
            self._mappings[e][agent] = new_module
            self._games.remap(e, agent, new_module)  # the hooks' game says which module acts from now on
            self._pending[e].pop(agent, None)
            self._agent_states.pop((e, agent), None)  # the new module starts from its initial state
            self._force_starts.add((e, agent))  # the new module's connectors hold no history of this episode
        # Empty between sample() calls (trajectories live within one); the removed module's rows never reach _collect.
        self._open = {key: t for key, t in self._open.items() if t.module_id != module_id}
        self._closed = [t for t in self._closed if t.module_id != module_id]
        super()._apply_removal(removal)
        self._initial_states.pop(module_id, None)
        self.env_to_module.remove(module_id)
        self.module_to_env.remove(module_id)
        self._mapping_fn = removal.mapping_fn
        self.policy_mapping = self._static_mapping()

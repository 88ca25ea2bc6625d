"""MultiAgentEnvRunner: samples :class:`~cairn.rl.env.multi_agent_env.MultiAgentEnv` environments.

The runner steps ``num_envs_per_env_runner`` copies of the environment. Each
step, the agents that were given an observation act: each agent's module is
named for the episode by ``policy_mapping_fn(agent_id, episode)`` (called once
per agent per episode, and again when its module is removed mid-episode, see
:meth:`MultiAgentEnvRunner.remove_module`), the observations of the agents of
one module go through that module's ``env_to_module`` pipeline together, the
module samples their actions, its ``module_to_env`` pipeline turns them into env
actions, and each copy is stepped with its agents' actions. A copy whose
episode ends (``"__all__"``) is reset at once.

Agents may have different spaces: each module is built from the spaces of the
agents mapped to it (:func:`~cairn.rl.env.multi_agent_env.infer_module_spaces`),
has connector pipelines of its own (:class:`~cairn.rl.env.module_pipelines.ModulePipelines`,
checkpointed as ``env_to_module_connector/<module_id>/``), and an agent mapped
to a module of other spaces is refused when the mapping is made. Agent ids are
kept as the env gives them (``str`` or ``int``), also in checkpoints.

Every agent builds its own trajectory. A transition is complete when the
agent acts again or its episode ends, so the reward of a transition is all
the reward the agent got in between (in turn-based games the other player's
move comes between). :meth:`sample` returns the transitions completed during
the call, per module, as one time-major column ``[T, 1, ...]`` of agent
trajectories one after the other: where a trajectory stops inside the batch
(the agent's episode ended, or it goes on in the next call), ``terminateds``
or ``truncateds`` says so and ``final_vf`` holds the value to bootstrap from,
so that GAE (:func:`~cairn.rl.utils.gae.compute_gae`) runs per agent
trajectory. Transitions still open are kept for the next call.

Exact resume: the state holds, besides the base runner's counters, RNG,
windows and connectors, each copy's environment state (when a handler is
registered for its class, see :mod:`cairn.rl.env.env_state`), its current
observations, policy mapping, open transitions and returns. Without a
handler, the checkpoint says that episodes restart on restore.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
import numpy.typing as npt
import torch

from cairn.errors import IncompatibleCheckpointError
from cairn.rl.config.algorithm_config import AlgorithmConfig
from cairn.rl.connectors.connectors import ConnectorPipeline
from cairn.rl.core.columns import Columns
from cairn.rl.core.rl_module.rl_module import RLModuleSpec
from cairn.rl.core.rl_module.stateful import initial_state, state_columns, state_out, strip_time_dim
from cairn.rl.env.connector_building import build_env_to_module, build_module_to_env, check_learner_connector
from cairn.rl.env.env_runner import EnvRunner, ModuleRemoval, SampleBatch, _is_int, as_tensors
from cairn.rl.env.env_state import (
    env_state_mismatch,
    env_state_problem,
    get_env_state,
    set_env_state,
    supports_env_state,
)
from cairn.rl.env.episodes import SingleAgentEpisode, agent_episodes_state
from cairn.rl.env.module_outputs import owed_output, owes_logp_and_values
from cairn.rl.env.module_pipelines import ModulePipelines
from cairn.rl.env.multi_agent_env import (
    ALL_AGENTS,
    AgentID,
    EpisodeInfo,
    MultiAgentEnv,
    Spaces,
    build_module_specs,
    check_agent_ids,
    infer_module_spaces,
    make_multi_agent_env,
    resolve_policy_mapping_fn,
    space_mismatch,
)
from cairn.rl.env.pretrained_connectors import restore_module_pretrained_connectors
from cairn.rl.env.state_checks import (
    corrupt,
    count,
    episode_from_state,
    layout_problem,
    number,
    runner_local_states,
    unique,
)
from cairn.rl.env.state_checks import (
    mapping as state_dict,
)
from cairn.rl.utils.nested import index_rows, map_leaves, stack_rows, to_state

__all__ = ["MultiAgentEnvRunner"]

# (obs, action, action_logp, vf_pred, reward, terminated, truncated, final_vf, state fed or None) of one agent step.
_Row = tuple[npt.NDArray[Any], npt.NDArray[Any], float, float, float, bool, bool, float, dict[str, Any] | None]


class _Trajectory:
    """The completed rows of one agent in one episode, collected during one sample() call."""

    def __init__(self, module_id: str) -> None:
        self.module_id = module_id
        self.rows: list[_Row] = []


class MultiAgentEnvRunner(EnvRunner):
    """Samples a multi-agent environment; one module per agent per episode.

    Each module gets the spaces of the agents mapped to it: with
    ``policy_mapping`` (or one policy) those of the agents it names; with a
    ``policy_mapping_fn``, those of the agents it maps a dummy episode's agents
    to (RLlib's space inference; :func:`~cairn.rl.env.multi_agent_env.infer_module_spaces`).
    The :attr:`observation_space` and :attr:`action_space` attributes are those
    of the first agent (what ``Algorithm.add_module`` gives a spec without spaces).

    Args:
        config: The algorithm's config; ``env`` names a
            :class:`~cairn.rl.env.multi_agent_env.MultiAgentEnv`, and
            ``policy_mapping_fn`` (or ``policy_mapping``, or a single policy)
            maps agents to modules.
        worker_index: Index of this runner in its group; seeds differ per index.

    Raises:
        ValueError: Agents with different spaces mapped to one module, agent ids
            that are no ``str``/``int``, no way to map agents to modules, or an
            env that is no multi-agent environment.
    """

    STATE_VERSION = 1

    # Turn-based episodes: an agent's next observation comes after the others acted; not sampled yet.
    samples_next_obs: ClassVar[bool] = False

    # One pipeline per module (agents with other spaces need other connectors); the base class's
    # group methods (deltas, synced states, components) take it as they take one pipeline.
    env_to_module: ModulePipelines  # type: ignore[assignment]
    module_to_env: ModulePipelines  # type: ignore[assignment]

    def __init__(self, config: AlgorithmConfig, *, worker_index: int = 0) -> None:
        self.config = config
        self.worker_index = int(worker_index)
        num_envs = int(config.num_envs_per_env_runner)
        if num_envs < 1:
            raise ValueError(f"num_envs_per_env_runner must be >= 1, got {num_envs}.")
        self.num_envs = num_envs
        self.envs: list[MultiAgentEnv] = [make_multi_agent_env(config.env, config.env_config) for _ in range(num_envs)]
        first = self.envs[0]
        # The ids as the env gives them (RLlib's make_multi_agent numbers agents 0..n-1): never str()-ed.
        self.possible_agents: list[AgentID] = check_agent_ids(first.possible_agents, env=config.env)
        if not self.possible_agents:
            raise ValueError(f"env={config.env!r} has no possible_agents; a MultiAgentEnv lists every agent id.")
        self._agent_spaces: dict[AgentID, Spaces] = {}
        for agent in self.possible_agents:
            self._spaces_of(agent)
        self.env_id = config.env
        self._mapping_fn = self._resolve_mapping(config)
        module_spaces = infer_module_spaces(config, self._agent_spaces, self._mapping_fn)
        observation_space, action_space = self._agent_spaces[self.possible_agents[0]]
        # Stable connector row ids of (env copy, agent) pairs (frame stacks are kept per row).
        self._agent_numbers: dict[tuple[type, AgentID], int] = {
            (type(agent), agent): i for i, agent in enumerate(self.possible_agents)
        }
        self._extra_agents: list[AgentID] = []  # agents outside possible_agents, numbered as they appear
        self._force_starts: set[tuple[int, AgentID]] = set()
        """(env copy, agent) rows whose next observation starts their connectors' histories afresh."""
        seeds = self._init_sampling(config, observation_space, action_space, module_spaces=module_spaces)
        self._initial_states = {
            module_id: state for module_id, module in self.module.items() if (state := initial_state(module, module_id))
        }
        """Module id -> ``get_initial_state()`` (tensors) of each stateful module."""
        self._module_states: dict[str, dict[str, torch.Tensor]] = {}  # the base class's per-slot states: unused
        self._agent_states: dict[tuple[int, AgentID], dict[str, torch.Tensor]] = {}
        """(env copy, agent) -> the state its stateful module feeds with the agent's next observation
        (``STATE_OUT`` of its last action): the memory of the agents' episodes in flight, checkpointed."""
        self._multi_agent = True
        self.policy_mapping = self._static_mapping()
        """Agent id -> module id for every episode when no ``policy_mapping_fn`` decides per
        episode (``config.policy_mapping``, or every agent to the only policy); empty when a
        function maps agents. ``Algorithm.add_module`` records it, keeping the mapping in effect."""
        self.env_state_saved = supports_env_state(first)
        self._episode_numbers = [0] * num_envs
        self._mappings: list[dict[AgentID, str]] = [{} for _ in range(num_envs)]
        self._pending: list[dict[AgentID, dict[str, Any]]] = [{} for _ in range(num_envs)]
        self._agent_returns: list[dict[AgentID, float]] = [{} for _ in range(num_envs)]
        self._agent_steps: list[dict[AgentID, int]] = [{} for _ in range(num_envs)]
        self._obs_dicts: list[dict[AgentID, Any]] = []
        for index, env in enumerate(self.envs):
            obs, _ = env.reset(seed=int(seeds[0]) + index)
            self._obs_dicts.append(dict(obs))
        self._open: dict[tuple[int, AgentID], _Trajectory] = {}
        self._closed: list[_Trajectory] = []
        self._last_agent_steps = 0
        self._agent_episodes: dict[tuple[int, Any], SingleAgentEpisode] = {}
        """(env copy, agent) -> the episode object its hooks see (when a callback overrides an episode hook)."""

    # ------------------------------------------------------------------ spaces and pipelines

    def _spaces_of(self, agent: AgentID) -> Spaces:
        """The (observation, action) spaces of ``agent``, as the env gives them (asked once per agent)."""
        spaces = self._agent_spaces.get(agent)
        if spaces is None:
            check_agent_ids([agent], env=self.config.env)
            first = self.envs[0]
            spaces = self._agent_spaces[agent] = (first.get_observation_space(agent), first.get_action_space(agent))
        return spaces

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

    def _check_spaces(self, agent: AgentID, module_id: str) -> None:
        """Refuse acting with ``module_id`` for an agent of other spaces (a mapping made per episode)."""
        # The spaces the module's agents give (its pipeline's input), not the module's own (flattened, stacked).
        obs_space, act_space = self._module_env_spaces[module_id]
        agent_spaces = self._spaces_of(agent)
        if obs_space != agent_spaces[0] or act_space != agent_spaces[1]:
            raise ValueError(
                f"env={self.config.env!r}, policy_mapping_fn={self.config.policy_mapping_fn!r}: "
                + space_mismatch(agent, agent_spaces, None, module_id, (obs_space, act_space))
            )

    # ------------------------------------------------------------------ policy mapping

    def _resolve_mapping(self, config: AlgorithmConfig) -> Callable[[Any, EpisodeInfo], str]:
        if config.policy_mapping_fn is not None:
            return resolve_policy_mapping_fn(str(config.policy_mapping_fn))
        policies = tuple(config.policies)
        if config.policy_mapping is not None:
            static: dict[Any, str] = dict(config.policy_mapping)

            def by_table(agent_id: Any, episode: EpisodeInfo) -> str:
                if agent_id not in static:
                    raise ValueError(f"policy_mapping has no entry for agent {agent_id!r} of env={config.env!r}.")
                return static[agent_id]

            return by_table
        if len(policies) != 1:
            raise ValueError(
                f"policies={list(policies)} has several module ids: set policy_mapping_fn (or policy_mapping) to "
                "say which module each agent uses."
            )

        def only(agent_id: Any, episode: EpisodeInfo) -> str:
            return policies[0]

        return only

    def _static_mapping(self) -> dict[Any, str]:
        """:attr:`policy_mapping` for the current config."""
        if self.config.policy_mapping_fn is not None:
            return {}
        if self.config.policy_mapping is not None:
            return dict(self.config.policy_mapping)
        if len(self.config.policies) == 1:
            return dict.fromkeys(self.possible_agents, self.config.policies[0])
        return {}

    def _map_agent(
        self,
        env_index: int,
        agent: AgentID,
        mapping_fn: Callable[[Any, EpisodeInfo], str],
        module_ids: tuple[str, ...],
    ) -> str:
        """The module ``mapping_fn`` picks for ``agent`` in copy ``env_index``'s current episode.

        The episode's seed depends only on the runner, the copy and the episode
        number, so the same call picks the same module after a restore.

        Raises:
            ValueError: No such module, or one of other spaces than the agent's.
        """
        number = self._episode_numbers[env_index]
        seed = np.random.SeedSequence([self.config.seed, 31337, self.worker_index, env_index, number])
        episode = EpisodeInfo(
            id_=f"{self.worker_index}-{env_index}-{number}",
            seed=int(seed.generate_state(1)[0]),
            env_index=env_index,
            worker_index=self.worker_index,
            module_ids=module_ids,
        )
        module_id = mapping_fn(agent, episode)
        if module_id not in module_ids:
            raise ValueError(
                f"policy_mapping_fn={self.config.policy_mapping_fn!r} mapped agent {agent!r} to {module_id!r}, "
                f"which is not one of the modules {list(module_ids)}."
            )
        self._check_spaces(agent, module_id)
        return str(module_id)

    def _module_for(self, env_index: int, agent: AgentID) -> str:
        mapping = self._mappings[env_index]
        if agent not in mapping:
            mapping[agent] = self._map_agent(env_index, agent, self._mapping_fn, tuple(self.module.keys()))
        return mapping[agent]

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
        returned by :meth:`sample` were collected with ``module_id`` and are
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

    # ------------------------------------------------------------------ sampling

    def _act_per_module(
        self, acting: list[tuple[int, AgentID]], modules: list[str]
    ) -> list[tuple[npt.NDArray[Any], npt.NDArray[Any], float, float, Any, dict[str, Any] | None]]:
        """``(filtered obs, action, logp, value, env action, state fed)`` of each acting agent, in ``acting``'s order.

        The agents of one module go through its ``env_to_module`` pipeline, its
        forward pass and its ``module_to_env`` pipeline together; modules go in
        a fixed order (the action RNG is drawn module by module). A stateful module
        gets each agent's state (its initial state when the agent's episode starts);
        the state fed is ``None`` for a stateless one.
        """
        out: list[Any] = [None] * len(acting)
        explore = bool(self.config.explore)  # False: evaluation runners act greedily
        for module_id in self.module:
            rows = [i for i, m in enumerate(modules) if m == module_id]
            if not rows:
                continue
            raw = _stack_obs([self._obs_dicts[acting[i][0]][acting[i][1]] for i in rows])
            context = self._connector_context([acting[i] for i in rows], explore=explore)
            filtered = self.env_to_module[module_id](raw, update=True, column="obs", **context)
            keys = [acting[i] for i in rows]
            batch, fed = self._agents_batch(module_id, as_tensors(filtered), keys, context["episode_starts"])
            if explore:
                result = self.module[module_id].forward_exploration(batch, generator=self._generator)
                result = self._one_step_result(module_id, result, keys) if fed is not None else result
                owed = owes_logp_and_values(self.config, module_id)  # not: heuristics, untrained modules
                zeros = torch.zeros(len(rows))
                logp_t = owed_output(result, "action_logp", module_id) if owed else result.get("action_logp", zeros)
                values_t = owed_output(result, "vf_preds", module_id) if owed else result.get("vf_preds", zeros)
                logp, values = logp_t.numpy(), values_t.numpy()
            else:  # evaluation runners act greedily; forward_inference gives actions only
                result = self.module[module_id].forward_inference(batch)
                result = self._one_step_result(module_id, result, keys) if fed is not None else result
                logp = values = np.zeros(len(rows), dtype=np.float32)
            actions = result["actions"].numpy()
            context.pop("episode_starts")
            env_actions = self.module_to_env[module_id](actions, update=True, column="actions", **context)
            for k, i in enumerate(rows):
                state = None if fed is None else {name: value[k].numpy().copy() for name, value in fed.items()}
                row = index_rows(filtered, k)  # a Dict/Tuple observation: row k of each leaf
                out[i] = (row, np.asarray(actions[k]), float(logp[k]), float(values[k]), env_actions[k], state)
        return out

    def _agents_batch(
        self, module_id: str, obs: Any, keys: Sequence[tuple[int, AgentID]], starts: npt.NDArray[np.bool_]
    ) -> tuple[dict[str, Any], dict[str, torch.Tensor] | None]:
        """The forward batch of ``module_id`` for agents ``keys`` and, for a stateful module, the state fed:
        observations of one time step and each agent's state (the initial one where its episode starts)."""
        initial = self._initial_states.get(module_id)
        if initial is None:
            return {"obs": obs}, None
        states = [
            initial if start or key not in self._agent_states else self._agent_states[key]
            for key, start in zip(keys, starts, strict=True)
        ]
        fed = {name: torch.stack([state[name] for state in states]) for name in initial}
        return {"obs": map_leaves(lambda leaf: leaf.unsqueeze(1), obs), Columns.STATE_IN: fed}, fed

    def _one_step_result(
        self, module_id: str, result: Mapping[str, Any], keys: Sequence[tuple[int, AgentID]]
    ) -> dict[str, Any]:
        """A stateful module's one-step outputs without their time step; its ``STATE_OUT`` kept per
        agent, for the agent's next observation."""
        rows, where = len(keys), f"the forward pass of module {module_id!r}"
        new_states = state_out(result, self._initial_states[module_id], rows, where=where)
        for k, key in enumerate(keys):
            self._agent_states[key] = {name: value[k].clone() for name, value in new_states.items()}
        shapes = {"actions": tuple(self.module[module_id].action_space.shape or ()), "action_logp": (), "vf_preds": ()}
        return {
            column: strip_time_dim(value, rows, shapes[column], key=column, where=where) if column in shapes else value
            for column, value in result.items()
        }

    def _connector_context(self, rows: Sequence[tuple[int, AgentID]], *, explore: bool) -> dict[str, Any]:
        """What the connector pieces get besides the batch for ``rows`` (env copy, agent) acting now.

        ``slots``: a stable id per (env copy, agent); ``episode_starts``: the agent's
        observation begins its episode (it has not acted in it yet), so frame stacks
        restart; ``agent_ids``: the rows' agents.
        """
        starts = np.array(
            [agent not in self._agent_steps[e] or (e, agent) in self._force_starts for e, agent in rows],
            dtype=np.bool_,
        )
        self._force_starts.difference_update(rows)
        return {
            "rl_module": self.module,
            "explore": explore,
            "slots": np.array([self._row_slot(e, agent) for e, agent in rows], dtype=np.int64),
            "episode_starts": starts,
            "agent_ids": [agent for _, agent in rows],
        }

    def _row_slot(self, env_index: int, agent: AgentID) -> int:
        """The connectors' stable row id of ``agent`` in env copy ``env_index`` (the same after a restore)."""
        key = (type(agent), agent)
        number = self._agent_numbers.get(key)
        if number is None:  # an agent outside possible_agents: numbered as it appears (kept in the env state)
            number = self._agent_numbers[key] = len(self._agent_numbers)
            self._extra_agents.append(agent)
        return number * self.num_envs + env_index

    def _final_value(self, module_id: str, env_index: int, agent: AgentID, final_obs: Any) -> float:
        if not owes_logp_and_values(self.config, module_id):
            return 0.0  # a module that is not trained owes no values (its rows are never trained)
        raw = _stack_obs([final_obs])
        # The final observation continues the agent's stack (never an episode start); a look changes no state.
        filtered = self.env_to_module[module_id](
            raw,
            update=False,
            column="obs",
            rl_module=self.module,
            explore=bool(self.config.explore),
            slots=np.array([self._row_slot(env_index, agent)], dtype=np.int64),
            episode_starts=np.zeros(1, dtype=np.bool_),
            agent_ids=[agent],
        )
        key = (env_index, agent)
        batch, fed = self._agents_batch(module_id, as_tensors(filtered), [key], np.zeros(1, dtype=np.bool_))
        with torch.no_grad():  # an RLlib-style compute_values keeps gradients for the learner
            values = self.module[module_id].compute_values(batch)
        if fed is not None:  # the agent's state after its last action: the one its final observation goes with
            values = strip_time_dim(values, 1, (), key="values", where=f"compute_values of module {module_id!r}")
        return float(values[0])

    def _complete(self, env_index: int, agent: AgentID, *, terminated: bool, truncated: bool, final_vf: float) -> None:
        """Turn the agent's open transition into a row of its trajectory."""
        pending = self._pending[env_index].pop(agent)
        key = (env_index, agent)
        trajectory = self._open.get(key)
        if trajectory is None:
            trajectory = self._open[key] = _Trajectory(self._mappings[env_index][agent])
        trajectory.rows.append(
            (
                pending["obs"],
                pending["action"],
                float(pending["logp"]),
                float(pending["vf"]),
                float(pending["reward"]),
                terminated,
                truncated,
                final_vf,
                pending.get("state_in"),
            )
        )
        if terminated or truncated:
            self._closed.append(self._open.pop(key))

    def _step_env(self, env_index: int, actions: dict[AgentID, Any]) -> int:
        """Step copy ``env_index``; close what ended; reset it if its episode ended. Returns episodes ended."""
        env = self.envs[env_index]
        obs, rewards, terminateds, truncateds, _ = env.step(actions)
        pending = self._pending[env_index]
        returns = self._agent_returns[env_index]
        for agent, reward in rewards.items():
            returns[agent] = returns.get(agent, 0.0) + float(reward)
            if agent in pending:
                pending[agent]["reward"] += float(reward)
        all_terminated = bool(terminateds.get(ALL_AGENTS, False))
        all_done = all_terminated or bool(truncateds.get(ALL_AGENTS, False))
        candidates = [*pending, *[a for a in (*terminateds, *truncateds) if a != ALL_AGENTS and a not in pending]]
        ended: list[AgentID] = []
        for agent in dict.fromkeys(candidates):
            terminated = all_terminated or bool(terminateds.get(agent, False))
            truncated = not terminated and (all_done or bool(truncateds.get(agent, False)))
            if not (terminated or truncated):
                continue
            ended.append(agent)
            if agent in pending:
                final_vf = 0.0
                if truncated and agent in obs:
                    final_vf = self._final_value(self._mappings[env_index][agent], env_index, agent, obs[agent])
                self._complete(env_index, agent, terminated=terminated, truncated=truncated, final_vf=final_vf)
            self._agent_states.pop((env_index, agent), None)  # its episode's memory ends with it
            if agent in self._agent_steps[env_index]:
                self._agent_episode_hook("on_episode_end", env_index, agent, done=True)
                self._record_episode(
                    returns.get(agent, 0.0), self._agent_steps[env_index].pop(agent), self._mappings[env_index][agent]
                )
            returns.pop(agent, None)
        if all_done:
            for agent in list(pending):  # an agent the env forgot to end
                self._complete(env_index, agent, terminated=all_terminated, truncated=not all_terminated, final_vf=0.0)
            self._episode_numbers[env_index] += 1
            self._mappings[env_index] = {}
            self._agent_states = {key: v for key, v in self._agent_states.items() if key[0] != env_index}
            self._agent_returns[env_index] = {}
            self._agent_steps[env_index] = {}
            next_obs, _ = env.reset()
            self._obs_dicts[env_index] = dict(next_obs)
        else:
            self._obs_dicts[env_index] = {agent: o for agent, o in obs.items() if agent not in ended}
        return len(ended)

    def sample(self) -> dict[str, SampleBatch]:
        """Step every env copy ``rollout_length`` times.

        Returns:
            Module id -> the module's completed transitions, as a
            :data:`~cairn.rl.env.env_runner.SampleBatch` of shape ``[T, 1, ...]``
            (see the module docstring); modules without one are left out.
        """
        self._episodes_this_iteration = 0
        self.last_episodes = []
        agent_steps = 0
        for _ in range(int(self.config.rollout_length)):
            acting = [(e, agent) for e in range(self.num_envs) for agent in self._obs_dicts[e]]
            actions_per_env: list[dict[AgentID, Any]] = [{} for _ in range(self.num_envs)]
            if acting:
                modules = [self._module_for(e, agent) for e, agent in acting]
                acted = self._act_per_module(acting, modules)
                for i, (e, agent) in enumerate(acting):
                    filtered, action, logp, value, env_action, fed = acted[i]
                    if agent in self._pending[e]:
                        self._complete(e, agent, terminated=False, truncated=False, final_vf=0.0)
                    self._pending[e][agent] = {
                        "obs": filtered,
                        "action": action,
                        "logp": logp,
                        "vf": value,
                        "reward": 0.0,
                    }
                    if fed is not None:  # a stateful module: the state fed with this observation
                        self._pending[e][agent]["state_in"] = fed
                    if agent not in self._agent_steps[e]:  # the agent's first action of this episode
                        self._agent_steps[e][agent] = 0
                        self._agent_episode_hook("on_episode_start", e, agent, done=False)
                    self._agent_steps[e][agent] += 1
                    actions_per_env[e][agent] = int(env_action) if np.ndim(env_action) == 0 else env_action
            for e in range(self.num_envs):
                self._step_env(e, actions_per_env[e])
            if self._step_hook:
                for e, agent in acting:
                    if agent in self._agent_steps[e]:  # its episode goes on
                        self._agent_episode_hook("on_episode_step", e, agent, done=False)
            agent_steps += len(acting)
            self.num_env_steps_sampled_lifetime += self.num_envs
            self.num_agent_steps_sampled_lifetime += len(acting)
        self._last_agent_steps = agent_steps
        batches = self._collect()
        self._end_sample(batches, agent_steps=agent_steps)
        return batches

    def _agent_episode_hook(self, hook: str, env_index: int, agent: AgentID, *, done: bool) -> None:
        """Call the callbacks' ``hook`` for one agent's episode in env copy ``env_index``.

        As the metrics do, each agent's part of a game is an episode of its own: it
        starts with the agent's first action and ends when the agent is done.
        """
        if not self._episode_hooks:  # no callback overrides an episode hook
            return
        episode = self._agent_episodes.get((env_index, agent))
        if episode is None:  # its custom_data lives until the agent's episode ends (and in checkpoints)
            episode = SingleAgentEpisode(
                f"{self.worker_index}-{env_index}-{self._episode_numbers[env_index]}-{agent}",
                env_index=env_index,
                agent_id=agent,
                module_id=self._mappings[env_index][agent],
                keep_history=False,
            )
            self._agent_episodes[(env_index, agent)] = episode
        episode.module_id = self._mappings[env_index][agent]
        episode.set_summary(
            episode_return=float(self._agent_returns[env_index].get(agent, 0.0)),
            length=int(self._agent_steps[env_index].get(agent, 0)),
            is_done=done,
        )
        getattr(self.callbacks, hook)(
            episode=episode,
            env_runner=self,
            metrics_logger=self.metrics,
            env=self.envs[env_index],
            env_index=env_index,
            rl_module=self.module,
        )
        if done:
            del self._agent_episodes[(env_index, agent)]

    def _collect(self) -> dict[str, SampleBatch]:
        """The rows completed so far, per module; open trajectories end in a cut with their bootstrap value."""
        per_module: dict[str, list[_Row]] = {}
        trajectories = [*self._closed, *self._open.values()]
        for (env_index, agent), trajectory in self._open.items():
            if trajectory.rows:
                # The agent acted again (that completed its last row): bootstrap from that value.
                obs, action, logp, vf, reward, _, _, _, fed = trajectory.rows[-1]
                bootstrap = float(self._pending[env_index][agent]["vf"])
                trajectory.rows[-1] = (obs, action, logp, vf, reward, False, True, bootstrap, fed)
        for trajectory in trajectories:
            per_module.setdefault(trajectory.module_id, []).extend(trajectory.rows)
        self._closed = []
        self._open = {}
        batches: dict[str, SampleBatch] = {}
        for module_id in self.module:
            rows = per_module.get(module_id)
            if not rows:
                continue
            column = list(zip(*rows, strict=True))
            batches[module_id] = {
                "obs": _obs_column(column[0]),
                "actions": np.stack(column[1])[:, None],
                "action_logp": np.asarray(column[2], dtype=np.float32)[:, None],
                "vf_preds": np.asarray(column[3], dtype=np.float32)[:, None],
                "rewards": np.asarray(column[4], dtype=np.float64)[:, None],
                "terminateds": np.asarray(column[5], dtype=np.bool_)[:, None],
                "truncateds": np.asarray(column[6], dtype=np.bool_)[:, None],
                "final_vf": np.asarray(column[7], dtype=np.float32)[:, None],
                "bootstrap_vf": np.zeros(1, dtype=np.float32),
            }
            initial = self._initial_states.get(module_id)
            if initial is not None:  # the state fed at each row (a row of a re-mapped agent: the initial one)
                states_fed = [
                    row[8] if row[8] is not None else {k: v.numpy() for k, v in initial.items()} for row in rows
                ]
                batches[module_id].update(
                    state_columns({name: np.stack([f[name] for f in states_fed])[:, None] for name in initial})
                )
        return batches

    def _agent_steps_of_last_sample(self) -> int:
        return self._last_agent_steps

    # ------------------------------------------------------------------ Checkpointable

    def _env_state(self) -> dict[str, Any]:
        state: dict[str, Any] = {"saved": self.env_state_saved, "env": self.config.env, "num_envs": self.num_envs}
        if self.env_state_saved:
            state["sub_envs"] = [get_env_state(env) for env in self.envs]
            state["episodes"] = [
                {
                    "number": self._episode_numbers[e],
                    "obs": {agent: to_state(o) for agent, o in self._obs_dicts[e].items()},
                    "mapping": dict(self._mappings[e]),
                    "pending": {
                        agent: {
                            "obs": to_state(p["obs"]),
                            "action": np.array(p["action"], copy=True),
                            "logp": p["logp"],
                            "vf": p["vf"],
                            "reward": p["reward"],
                        }
                        for agent, p in self._pending[e].items()
                    },
                    "returns": dict(self._agent_returns[e]),
                    "steps": dict(self._agent_steps[e]),
                }
                for e in range(self.num_envs)
            ]
            if self._initial_states:  # the memory of the agents of stateful modules, in flight
                self._save_agent_states(state["episodes"])
            state["episode_api"] = agent_episodes_state(self._agent_episodes)  # custom_data of episodes in flight
            local = self._runner_local_connector_states()
            if local:  # the connectors' part of the episodes in flight (frame stacks per row), this runner's own
                state["connectors"] = local
                state["extra_agents"] = list(self._extra_agents)
                state["force_starts"] = [[e, agent] for e, agent in sorted(self._force_starts, key=repr)]
        return state

    def _read_env_state(self, env_state: Mapping[str, Any]) -> dict[str, Any] | None:
        """The environments' part of a state, checked (see ``state_checks``); None when it does not fit
        (another env, number of copies or agents: the episodes restart). Changes nothing."""
        where = f"{self.checkpoint_label}/env"
        episodes, sub_states = env_state.get("episodes"), env_state.get("sub_envs")
        fits = (
            env_state.get("saved") is True
            and self.env_state_saved
            and env_state.get("env") == self.config.env
            and _is_int(env_state.get("num_envs"), self.num_envs)
            and isinstance(episodes, list | tuple)
            and len(episodes) == self.num_envs
            and isinstance(sub_states, list | tuple)
            and len(sub_states) == self.num_envs
            and all(env_state_mismatch(env, sub) is None for env, sub in zip(self.envs, sub_states, strict=True))
            and all(isinstance(ep, Mapping) and _agent_keyed(ep, self.possible_agents) for ep in episodes)
            and all(isinstance(m, str) and m in self.module for ep in episodes for m in ep["mapping"].values())
        )
        if not fits:
            return None
        assert isinstance(episodes, list | tuple) and isinstance(sub_states, list | tuple)
        for e, (env, sub) in enumerate(zip(self.envs, sub_states, strict=True)):
            problem = env_state_problem(env, sub)
            if problem is not None:
                raise corrupt(f"{where}/sub_envs/{e}", f"the environment's saved state does not fit: {problem}")
        rows = self._read_connector_rows(env_state, where=where)
        read_episodes = [
            self._read_episode(episode, where=f"{where}/episodes/{e}") for e, episode in enumerate(episodes)
        ]
        agents = [*self.possible_agents, *rows["extra"]]
        api = self._read_agent_episodes(env_state.get("episode_api", []), read_episodes, agents, where=where)
        memory = self._restored_agent_states(episodes)  # the recurrent states of the agents in flight
        return {
            "sub_envs": list(sub_states),
            "rows": rows,
            "episodes": read_episodes,
            "episode_api": api,
            "memory": memory,
        }

    def _read_episode(self, episode: Mapping[str, Any], *, where: str) -> dict[str, Any]:
        """One env copy's saved episode, checked: modules of the agents' spaces, observations and open
        transitions of the shapes the modules take, numbers where numbers go."""
        agent_map = {agent: str(m) for agent, m in episode["mapping"].items()}
        for agent, module_id in agent_map.items():
            try:
                self._check_spaces(agent, module_id)
            except ValueError as err:
                raise corrupt(f"{where}/mapping", str(err)) from err
        obs = {}
        for agent, saved in episode["obs"].items():
            obs[agent] = self._obs_from_state(agent, saved)
            problem = layout_problem(self._spaces_of(agent)[0], obs[agent])
            if problem is not None:
                raise corrupt(f"{where}/obs/{agent!r}", f"the observation of agent {agent!r} {problem}")
        pending = {agent: self._read_pending(agent, p, agent_map, where=f"{where}/pending/{agent!r}")
                   for agent, p in episode["pending"].items()}  # fmt: skip
        steps = {agent: count(n, where=f"{where}/steps/{agent!r}") for agent, n in episode["steps"].items()}
        unmapped = [agent for agent in steps if agent not in agent_map]
        if unmapped:
            raise corrupt(f"{where}/steps", f"agents {unmapped!r:.80} are in their episode but mapped to no module")
        return {
            "number": count(episode.get("number"), where=f"{where}/number"),
            "obs": obs,
            "mapping": agent_map,
            "pending": pending,
            "returns": {
                agent: number(r, where=f"{where}/returns/{agent!r}") for agent, r in episode["returns"].items()
            },
            "steps": steps,
        }

    def _read_pending(
        self, agent: AgentID, saved: Any, agent_map: Mapping[AgentID, str], *, where: str
    ) -> dict[str, Any]:
        """An agent's open transition: its module's (filtered) observation and action, and numbers."""
        saved = state_dict(saved, where=where)
        module_id = agent_map.get(agent)
        if module_id is None:
            raise corrupt(where, f"agent {agent!r} has an open transition but no module")
        spec = self.module_specs[module_id]
        assert spec.observation_space is not None and spec.action_space is not None
        for key, space in (("obs", spec.observation_space), ("action", spec.action_space)):
            problem = layout_problem(space, saved.get(key))
            if problem is not None:
                raise corrupt(f"{where}/{key}", f"module {module_id!r}'s {key} {problem}")
        obs = saved["obs"]
        return {
            # A Dict/Tuple observation of a module that takes them: rebuilt leaf by leaf in the space's layout.
            "obs": _nested_obs(spec.observation_space, obs)
            if isinstance(spec.observation_space, gym.spaces.Dict | gym.spaces.Tuple)
            else np.array(obs, dtype=np.float32, copy=True),
            "action": np.array(saved["action"], copy=True),
            **{key: number(saved.get(key), where=f"{where}/{key}") for key in ("logp", "vf", "reward")},
        }

    def _read_agent_episodes(
        self, states: Any, episodes: Sequence[Mapping[str, Any]], agents: Sequence[AgentID], *, where: str
    ) -> dict[tuple[int, Any], SingleAgentEpisode]:
        """The episode objects in flight: each of an agent in its episode, in an env copy, with a module."""
        if not isinstance(states, list | tuple):
            raise corrupt(f"{where}/episode_api", f"expected a list of episodes, found a {type(states).__name__}")
        out: dict[tuple[int, Any], SingleAgentEpisode] = {}
        for i, state in enumerate(states):
            episode = episode_from_state(state, where=f"{where}/episode_api/{i}")
            e, agent = episode.env_index, episode.agent_id
            key = (e, agent)
            in_flight = e < self.num_envs and _holds(list(episodes[e]["mapping"]), agent) and _holds(agents, agent)
            if not in_flight or key in out or episode.module_id not in self.module:
                raise corrupt(
                    f"{where}/episode_api/{i}",
                    f"is the episode of agent {agent!r:.40} in env copy {e} with module {episode.module_id!r:.40}, "
                    "which is no agent in flight there with a module of this runner (or it is listed twice)",
                )
            out[key] = episode
        return out

    def _set_env_state(self, env_state: Mapping[str, Any]) -> None:
        """Check, then apply, the environments' part of a state (see :meth:`EnvRunner.set_state`)."""
        self._apply_env_state(self._read_env_state(state_dict(env_state, where=f"{self.checkpoint_label}/env")))

    def _apply_env_state(self, read: dict[str, Any] | None) -> None:
        """Apply :meth:`_read_env_state`'s result (None: the episodes restart)."""
        if read is None:
            self.episodes_restarted = True
            # Connector histories (frame stacks) restart with the runner's own episodes.
            self._force_starts.update((e, agent) for e in range(self.num_envs) for agent in self._obs_dicts[e])
            return
        # Agent ids come back as they were saved (an int stays an int: the codec keeps int keys).
        self._apply_connector_rows(read["rows"])
        for env, sub_state in zip(self.envs, read["sub_envs"], strict=True):
            set_env_state(env, sub_state)
        for e, episode in enumerate(read["episodes"]):
            self._episode_numbers[e] = episode["number"]
            self._obs_dicts[e] = episode["obs"]
            self._mappings[e] = episode["mapping"]
            self._pending[e] = episode["pending"]
            self._agent_returns[e] = episode["returns"]
            self._agent_steps[e] = episode["steps"]
        agent_states, pending_states = read["memory"]  # the agents' recurrent states (checked when read)
        self._agent_states = agent_states
        for (e, agent), fed in pending_states.items():
            self._pending[e][agent]["state_in"] = fed
        self._agent_episodes = read["episode_api"]
        self.episodes_restarted = False

    def _save_agent_states(self, episodes: list[dict[str, Any]]) -> None:
        """Add each episode's agent states (``module_states``) and the states fed with its agents'
        pending transitions (``pending_states``) to the saved episodes."""
        for e, episode in enumerate(episodes):
            episode["module_states"] = {
                agent: {name: value.numpy().copy() for name, value in state.items()}
                for (env_index, agent), state in self._agent_states.items()
                if env_index == e
            }
            episode["pending_states"] = {
                agent: {name: np.array(value, copy=True) for name, value in p["state_in"].items()}
                for agent, p in self._pending[e].items()
                if "state_in" in p
            }

    def _restored_agent_states(
        self, episodes: Sequence[Mapping[str, Any]]
    ) -> tuple[dict[tuple[int, AgentID], dict[str, torch.Tensor]], dict[tuple[int, AgentID], dict[str, Any]]]:
        """The saved agent states and pending states, checked against the modules the agents map to.

        Raises:
            IncompatibleCheckpointError: An agent that is not in its episode or does not act with a stateful
                module, a state of other names or shapes, non-finite values, or an agent of a stateful module
                in flight without its state.
        """
        checked: dict[str, dict[tuple[int, AgentID], dict[str, torch.Tensor]]] = {}
        for e, episode in enumerate(episodes):
            mapping, where = dict(episode["mapping"]), f"env_runner/env/episodes/{e}"
            for table, needed in (("module_states", episode["steps"]), ("pending_states", episode["pending"])):
                saved = episode.get(table, {})
                stateful = {a for a in needed if mapping.get(a) in self._initial_states}
                if not isinstance(saved, Mapping) or set(saved) != stateful:
                    found = sorted(map(repr, saved)) if isinstance(saved, Mapping) else type(saved).__name__
                    raise IncompatibleCheckpointError(
                        f"{where}/{table} holds states of agents {found}, but the agents in flight of stateful "
                        f"modules are {sorted(map(repr, stateful))}: the checkpoint was written with other modules "
                        "or altered."
                    )
                for agent, state in saved.items():
                    checked.setdefault(table, {})[(e, agent)] = self._checked_state(
                        state, mapping[agent], f"{where}/{table}/{agent!r}"
                    )
        pending = {
            key: {name: value.numpy() for name, value in state.items()}
            for key, state in checked.get("pending_states", {}).items()
        }
        return checked.get("module_states", {}), pending

    def _checked_state(self, state: Any, module_id: str, where: str) -> dict[str, torch.Tensor]:
        """One agent's saved state as tensors, if it has the names and shapes of ``module_id``'s initial state."""
        initial = self._initial_states[module_id]
        if not isinstance(state, Mapping) or set(state) != set(initial):
            raise IncompatibleCheckpointError(
                f"{where} is not a state with the names {sorted(initial)} of module {module_id!r}; the checkpoint "
                "was written by another module or altered."
            )
        out: dict[str, torch.Tensor] = {}
        for name, value in initial.items():
            array = state[name]
            if not isinstance(array, np.ndarray) or array.dtype.kind not in "fiu" or array.shape != tuple(value.shape):
                shape = getattr(array, "shape", type(array).__name__)
                raise IncompatibleCheckpointError(
                    f"{where}/{name} has shape {shape}, but module {module_id!r} needs a numeric array of shape "
                    f"{tuple(value.shape)}: the checkpoint was written with another state size (lstm_cell_size). "
                    "Restore it with the config it was written with."
                )
            if not np.isfinite(array).all():
                raise IncompatibleCheckpointError(f"{where}/{name} holds NaN or infinite values.")
            out[name] = torch.as_tensor(array.copy()).to(value.dtype)
        return out

    def _obs_from_state(self, agent: AgentID, saved: Any) -> Any:
        """An agent's saved observation in the layout its space has (a Dict observation is a dict again).

        Raises:
            IncompatibleCheckpointError: The saved observation does not have the layout of the agent's space.
        """
        space = self._spaces_of(agent)[0]
        try:
            return _from_space_state(space, saved)
        except (KeyError, IndexError, TypeError) as err:
            raise IncompatibleCheckpointError(
                f"env_runner/env: the saved observation of agent {agent!r} does not fit its space {space} ({err!r}). "
                "The checkpoint was taken on another environment, or was altered."
            ) from err

    def _read_connector_rows(self, env_state: Mapping[str, Any], *, where: str) -> dict[str, Any]:
        """The saved runner-local connector states (frame stacks) and their row numbering, checked."""
        extra = env_state.get("extra_agents", [])
        connectors = env_state.get("connectors", {})
        starts = env_state.get("force_starts", [])
        if not isinstance(extra, list) or not isinstance(connectors, Mapping) or not isinstance(starts, list):
            raise IncompatibleCheckpointError(
                "env_runner/env: 'extra_agents', 'connectors' or 'force_starts' is not what cairn's multi-agent env "
                "runner saves. The checkpoint was altered."
            )
        try:
            extra = check_agent_ids(extra, env=self.config.env)
            force_starts = {(count(e, where=f"{where}/force_starts"), check_agent_ids([agent], env=self.config.env)[0])
                            for e, agent in starts}  # fmt: skip
        except (TypeError, ValueError) as err:
            raise IncompatibleCheckpointError(
                f"env_runner/env: the connectors' agent rows are not what cairn's multi-agent env runner saves ({err})."
            ) from err
        unique([*self.possible_agents, *extra], where=f"{where}/extra_agents")
        if any(e >= self.num_envs for e, _ in force_starts):
            raise corrupt(f"{where}/force_starts", f"names an env copy beyond this runner's {self.num_envs}")
        max_slot = (len(self.possible_agents) + len(extra)) * self.num_envs
        states = runner_local_states(self, connectors, max_slot=max_slot, where=f"{where}/connectors")
        return {"extra": extra, "force_starts": force_starts, "connectors": states}

    def _apply_connector_rows(self, rows: Mapping[str, Any]) -> None:
        """Take :meth:`_read_connector_rows`'s result."""
        self._agent_numbers = {(type(agent), agent): i for i, agent in enumerate(self.possible_agents)}
        self._extra_agents = []
        for agent in rows["extra"]:
            self._row_slot(0, agent)
        self._force_starts = set(rows["force_starts"])
        connectors = rows["connectors"]
        self.env_to_module.set_runner_local_states(connectors.get("env_to_module_connector", {}))
        self.module_to_env.set_runner_local_states(connectors.get("module_to_env_connector", {}))

    def close(self) -> None:
        """Close the environments."""
        for env in self.envs:
            env.close()


_EPISODE_AGENT_KEYS = ("obs", "mapping", "pending", "returns", "steps")


def _agent_keyed(episode: Mapping[str, Any], possible_agents: list[AgentID]) -> bool:
    """Whether every per-agent dict of a saved episode is keyed by ids of ``possible_agents``.

    Compared with their types: a checkpoint of an env whose agents were ``"0"``, ``"1"``
    does not fit one whose agents are ``0``, ``1`` (its episodes restart instead).
    """
    known = {(type(agent), agent) for agent in possible_agents}
    for key in _EPISODE_AGENT_KEYS:
        table = episode.get(key)
        if not isinstance(table, Mapping):
            return False
        if any(isinstance(agent, bool) or (type(agent), agent) not in known for agent in table):
            return False
    return True


def _holds(agents: Sequence[AgentID], agent: AgentID) -> bool:
    """Whether ``agent`` is one of ``agents``, types included (``1`` and ``"1"`` are two agents)."""
    return any(type(a) is type(agent) and a == agent for a in agents)


def _obs_column(rows: Sequence[Any]) -> Any:
    """The ``obs`` column ``[T, 1, ...]`` of a sample batch: float32 rows, or a dict/tuple of such columns
    (each leaf in its own dtype) for a module that takes Dict/Tuple observations."""
    if isinstance(rows[0], Mapping | tuple):
        return map_leaves(lambda leaf: leaf[:, None], stack_rows(rows))
    return np.stack(rows).astype(np.float32)[:, None]


def _nested_obs(space: gym.Space[Any], saved: Any) -> Any:
    """A saved Dict/Tuple observation (checked by ``layout_problem``) in the space's structure and dtypes."""
    if isinstance(space, gym.spaces.Dict):
        return {key: _nested_obs(sub, saved[str(key)]) for key, sub in space.spaces.items()}
    if isinstance(space, gym.spaces.Tuple):
        return tuple(_nested_obs(sub, saved[i]) for i, sub in enumerate(space.spaces))
    dtype = np.int64 if isinstance(space, gym.spaces.Discrete) else (space.dtype or np.float32)
    return np.array(saved, dtype=dtype, copy=True)


def _stack_obs(items: Sequence[Any]) -> Any:
    """One batch of single agent observations: float32 rows, or gymnasium's batched dict/tuple layout."""
    if isinstance(items[0], Mapping | tuple):
        return stack_rows(items)
    return np.stack([np.asarray(o, dtype=np.float32) for o in items])


def _from_space_state(space: gym.Space[Any], saved: Any) -> Any:
    """Rebuild :func:`~cairn.rl.utils.nested.to_state` data of one observation of ``space``."""
    if isinstance(space, gym.spaces.Dict):
        if not isinstance(saved, Mapping):
            raise TypeError(f"a dict for a Dict space, got {type(saved).__name__}")
        return {key: _from_space_state(sub, saved[str(key)]) for key, sub in space.spaces.items()}
    if isinstance(space, gym.spaces.Tuple):
        if not isinstance(saved, list | tuple) or len(saved) != len(space.spaces):
            raise TypeError(f"a list of {len(space.spaces)} for a Tuple space")
        return tuple(_from_space_state(sub, saved[i]) for i, sub in enumerate(space.spaces))
    if isinstance(saved, Mapping | list | tuple):
        raise TypeError(f"an array for {space}, got {type(saved).__name__}")
    return np.array(saved, copy=True)

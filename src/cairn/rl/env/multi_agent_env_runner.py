"""MultiAgentEnvRunner: samples :class:`~cairn.rl.env.multi_agent_env.MultiAgentEnv` environments.

The runner steps ``num_envs_per_env_runner`` copies of the environment. Each step, the agents that
were given an observation act: each agent's module is named for the episode by
``policy_mapping_fn(agent_id, episode)`` (called once per agent per episode, and again when its
module is removed mid-episode, see :meth:`MultiAgentEnvRunner.remove_module`), the observations of
the agents of one module go through that module's ``env_to_module`` pipeline together, the module
samples their actions, its ``module_to_env`` pipeline turns them into env actions, and each copy is
stepped with its agents' actions. A copy whose episode ends (``"__all__"``) is reset at once.

Agents may have different spaces: each module is built from the spaces of the
agents mapped to it (:func:`~cairn.rl.env.module_spaces.infer_module_spaces`),
has connector pipelines of its own (:class:`~cairn.rl.env.module_pipelines.ModulePipelines`,
checkpointed as ``env_to_module_connector/<module_id>/``), and an agent mapped
to a module of other spaces is refused when the mapping is made. Agent ids are
kept as the env gives them (``str`` or ``int``), also in checkpoints.

Every agent builds its own trajectory. A transition is complete when the
agent acts again or its episode ends, so the reward of a transition is all
the reward the agent got in between (in turn-based games the other player's
move comes between). :meth:`sample_batches` returns the transitions completed during
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

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt
import torch

from cairn.rl.config.algorithm_config import AlgorithmConfig
from cairn.rl.config.env_creators import live_env_creator
from cairn.rl.core.columns import Columns
from cairn.rl.core.rl_module.stateful import initial_state, state_columns, state_out, strip_time_dim
from cairn.rl.env.batch_modes import COMPLETE_EPISODES_MAX_STEPS, complete_episodes, too_long
from cairn.rl.env.env_runner import EnvRunner, SampleBatch, as_tensors
from cairn.rl.env.env_state import (
    supports_env_state,
)
from cairn.rl.env.module_outputs import owed_output, owes_logp_and_values
from cairn.rl.env.module_pipelines import ModulePipelines
from cairn.rl.env.module_spaces import check_agent_ids, infer_module_spaces, space_mismatch
from cairn.rl.env.multi_agent_env import (
    ALL_AGENTS,
    AgentID,
    EpisodeInfo,
    MultiAgentEnv,
    Spaces,
    make_multi_agent_env,
    resolve_policy_mapping_fn,
)
from cairn.rl.env.multi_agent_episode import MultiAgentEpisode
from cairn.rl.env.multi_agent_episode_sampling import MultiAgentEpisodeSampler
from cairn.rl.env.multi_agent_game_hooks import GameEpisodes
from cairn.rl.env.multi_agent_pipelines import MultiAgentRunnerPipelines
from cairn.rl.env.multi_agent_runner_state import MultiAgentRunnerState
from cairn.rl.env.runner_modules import MultiAgentRunnerModules
from cairn.rl.utils.nested import index_rows, map_leaves, stack_rows

__all__ = ["MultiAgentEnvRunner"]

# (obs, action, action_logp, vf_pred, reward, terminated, truncated, final_vf, state fed or None) of one agent step.
_Row = tuple[npt.NDArray[Any], npt.NDArray[Any], float, float, float, bool, bool, float, dict[str, Any] | None]


class _Trajectory:
    """The completed rows of one agent in one episode, collected during one sample() call."""

    def __init__(self, module_id: str) -> None:
        self.module_id = module_id
        self.rows: list[_Row] = []


class MultiAgentEnvRunner(MultiAgentRunnerModules, MultiAgentRunnerPipelines, MultiAgentRunnerState, EnvRunner):
    """Samples a multi-agent environment; one module per agent per episode.

    Each module gets the spaces of the agents mapped to it: with
    ``policy_mapping`` (or one policy) those of the agents it names; with a
    ``policy_mapping_fn``, those of the agents it maps a dummy episode's agents
    to (RLlib's space inference; :func:`~cairn.rl.env.module_spaces.infer_module_spaces`).
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
        creator = live_env_creator(config)  # environment(fn) or register_env: the config holds the creator
        self.envs: list[MultiAgentEnv] = [
            make_multi_agent_env(config.env, config.env_config, creator) for _ in range(num_envs)
        ]
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
        self._games = GameEpisodes(num_envs, self.worker_index, self._module_for, self._game_hook)
        """The games in flight as ``MultiAgentEpisode`` s, which the episode hooks get (only when a callback
        overrides one)."""
        self._episode_sampler: MultiAgentEpisodeSampler | None = None
        """RLlib's ``sample(num_timesteps=, ...)``: env copies of its own, built at its first call."""

    # ------------------------------------------------------------------ spaces and pipelines

    def _spaces_of(self, agent: AgentID) -> Spaces:
        """The (observation, action) spaces of ``agent``, as the env gives them (asked once per agent)."""
        spaces = self._agent_spaces.get(agent)
        if spaces is None:
            check_agent_ids([agent], env=self.config.env)
            first = self.envs[0]
            spaces = self._agent_spaces[agent] = (first.get_observation_space(agent), first.get_action_space(agent))
        return spaces

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
            return resolve_policy_mapping_fn(config.policy_mapping_fn)
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
            filtered = self.env_to_module[module_id](batch={"obs": raw}, episodes=None, update=True, **context)["obs"]
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
            to_env = {"actions": actions}
            env_actions = self.module_to_env[module_id](batch=to_env, episodes=None, update=True, **context)["actions"]
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
            "metrics": self.metrics,
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
            rl_module=self.module,
            batch={"obs": raw},
            episodes=None,
            explore=bool(self.config.explore),
            metrics=self.metrics,
            update=False,
            slots=np.array([self._row_slot(env_index, agent)], dtype=np.int64),
            episode_starts=np.zeros(1, dtype=np.bool_),
            agent_ids=[agent],
        )["obs"]
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
        obs, rewards, terminateds, truncateds, infos = env.step(actions)
        if self._episode_hooks:  # on_episode_step (and _end) of the game, before its copy is reset
            self._games.step(env_index, obs, actions, rewards, infos, terminateds, truncateds)
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

    def sample(
        self,
        *,
        num_timesteps: int | None = None,
        num_episodes: int | None = None,
        explore: bool | None = None,
        random_actions: bool = False,
        force_reset: bool = False,
    ) -> list[MultiAgentEpisode]:
        """RLlib's ``sample``: the games played, as ``MultiAgentEpisode`` s (the algorithm's batches are
        :meth:`sample_batches`'s).

        Args:
            num_timesteps: At least this many steps (env steps, or agent steps with
                ``count_steps_by="agent_steps"``; see :mod:`~cairn.rl.env.multi_agent_episode_sampling`).
            num_episodes: Exactly this many finished games, all started anew.
            explore: Sample actions (True) or take the greedy ones; default the config's.
            random_actions: Draw actions from the agents' action spaces.
            force_reset: Start new games in every copy first.

        Neither count given: ``rollout_fragment_length`` x ``num_envs_per_env_runner`` steps, or
        with ``batch_mode="complete_episodes"`` one finished game per env copy (RLlib's).

        As RLlib's, it calls the callbacks' episode hooks once per game (``on_episode_end`` with
        ``prev_episode_chunks``, the chunks of the game earlier calls returned) and ``on_sample_end``
        with the episodes.

        Returns:
            The :class:`~cairn.rl.env.multi_agent_episode.MultiAgentEpisode` s: finished, then running.

        Raises:
            SampleRequestError: Both counts, or a negative one.
        """
        if self._episode_sampler is None:
            hook = self._episode_api_hook if self._episode_hooks else None
            self._episode_sampler = MultiAgentEpisodeSampler(
                self.config,
                self.module,
                self._map_for_episode_api,
                self.worker_index,
                hook,
                pipelines=functools.partial(self._episode_api_pipelines, self.config),
                metrics=self.metrics,
            )
        episodes = self._episode_sampler.sample(
            self.module,
            num_timesteps=num_timesteps,
            num_episodes=num_episodes,
            explore=explore,
            random_actions=random_actions,
            force_reset=force_reset,
        )
        self.callbacks.on_sample_end(env_runner=self, metrics_logger=self.metrics, samples=episodes)
        return episodes

    def _episode_api_hook(self, hook: str, episode: MultiAgentEpisode, env: Any, env_index: int, **extra: Any) -> None:
        """Call the callbacks' episode ``hook`` for a game of RLlib's ``sample()`` (its own env copies)."""
        getattr(self.callbacks, hook)(
            episode=episode,
            env_runner=self,
            metrics_logger=self.metrics,
            env=env,
            env_index=env_index,
            rl_module=self.module,
            **extra,
        )

    def _map_for_episode_api(self, agent: AgentID, episode: EpisodeInfo) -> str:
        """The module ``policy_mapping_fn`` picks for ``agent`` in a game of RLlib's ``sample(...)``, checked."""
        module_id = self._mapping_fn(agent, episode)
        if module_id not in self.module:
            raise ValueError(
                f"policy_mapping_fn={self.config.policy_mapping_fn!r} mapped agent {agent!r} to {module_id!r}, "
                f"which is not one of the modules {list(self.module.keys())}."
            )
        self._check_spaces(agent, module_id)
        return str(module_id)

    def sample_batches(self) -> dict[str, SampleBatch]:
        """Step every env copy ``rollout_length`` times (the algorithm's call); with
        ``batch_mode="complete_episodes"``, go on with the copies whose game is in flight until each
        ended (:mod:`~cairn.rl.env.batch_modes`).

        Returns:
            Module id -> the module's completed transitions, as a
            :data:`~cairn.rl.env.env_runner.SampleBatch` of shape ``[T, 1, ...]``
            (see the module docstring); modules without one are left out.

        Raises:
            IncompleteEpisodesError: A game went on past the bound of ``"complete_episodes"``.
        """
        self._episodes_this_iteration = 0
        self.last_episodes = []
        agent_steps = env_steps = rounds = 0
        by_agents = self.config.count_steps_by == "agent_steps"
        wanted = int(self.config.rollout_length) * (self.num_envs if by_agents else 1)
        complete = complete_episodes(self.config)
        # Copies at the start of a game (no step yet): "complete_episodes" stops them once the count is reached.
        fresh = [not self._agent_steps[e] and not self._pending[e] for e in range(self.num_envs)]
        # Counting agent steps, a copy takes at most `wanted` env steps (each step with an agent
        # acting counts at least one), so an env whose agents seldom act cannot loop forever.
        while True:
            reached = rounds >= wanted or (by_agents and agent_steps >= wanted)
            copies = [e for e in range(self.num_envs) if not fresh[e]] if reached and complete else None
            if reached and not copies:
                break
            if copies is not None and rounds >= wanted + COMPLETE_EPISODES_MAX_STEPS:
                raise too_long(self.config.env, rounds)
            active = range(self.num_envs) if copies is None else copies
            numbers = list(self._episode_numbers)
            agent_steps += self._sample_step(active)
            for e in active:
                fresh[e] = self._episode_numbers[e] != numbers[e]  # its game ended: the next one has no step
            rounds += 1
            env_steps += len(active)
        batches = self._collect()
        self._end_sample(batches, agent_steps=agent_steps, env_steps=env_steps)
        return batches

    def _sample_step(self, copies: Sequence[int]) -> int:
        """One env step of each copy in ``copies`` (their agents act first); returns the agent steps."""
        if self._episode_hooks:  # on_episode_start of the games that begin now
            for e in copies:
                self._games.start(e, self._episode_numbers[e], self._obs_dicts[e])
        acting = [(e, agent) for e in copies for agent in self._obs_dicts[e]]
        actions_per_env: list[dict[AgentID, Any]] = [{} for _ in range(self.num_envs)]
        if acting:
            modules = [self._module_for(e, agent) for e, agent in acting]
            acted = self._act_per_module(acting, modules)
            for i, (e, agent) in enumerate(acting):
                filtered, action, logp, value, env_action, fed = acted[i]
                if agent in self._pending[e]:
                    self._complete(e, agent, terminated=False, truncated=False, final_vf=0.0)
                self._pending[e][agent] = {"obs": filtered, "action": action, "logp": logp, "vf": value, "reward": 0.0}
                if fed is not None:  # a stateful module: the state fed with this observation
                    self._pending[e][agent]["state_in"] = fed
                self._agent_steps[e][agent] = self._agent_steps[e].get(agent, 0) + 1
                actions_per_env[e][agent] = int(env_action) if np.ndim(env_action) == 0 else env_action
        for e in copies:
            self._step_env(e, actions_per_env[e])
        self.num_env_steps_sampled_lifetime += len(copies)
        self.num_agent_steps_sampled_lifetime += len(acting)
        return len(acting)

    def _game_hook(self, hook: str, episode: MultiAgentEpisode, env_index: int, **extra: Any) -> None:
        """Call the callbacks' ``hook`` (``on_episode_start``/``_step``/``_end``) for copy ``env_index``'s game."""
        getattr(self.callbacks, hook)(
            episode=episode,
            env_runner=self,
            metrics_logger=self.metrics,
            env=self.envs[env_index],
            env_index=env_index,
            rl_module=self.module,
            **extra,
        )

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

    # ------------------------------------------------------------------ Checkpointable

    def close(self) -> None:
        """Close the environments."""
        for env in self.envs:
            env.close()


def _obs_column(rows: Sequence[Any]) -> Any:
    """The ``obs`` column ``[T, 1, ...]`` of a sample batch: float32 rows, or a dict/tuple of such columns
    (each leaf in its own dtype) for a module that takes Dict/Tuple observations."""
    if isinstance(rows[0], Mapping | tuple):
        return map_leaves(lambda leaf: leaf[:, None], stack_rows(rows))
    return np.stack(rows).astype(np.float32)[:, None]


def _stack_obs(items: Sequence[Any]) -> Any:
    """One batch of single agent observations: float32 rows, or gymnasium's batched dict/tuple layout."""
    if isinstance(items[0], Mapping | tuple):
        return stack_rows(items)
    return np.stack([np.asarray(o, dtype=np.float32) for o in items])

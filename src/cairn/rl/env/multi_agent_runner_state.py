"""The saved state of a multi-agent env runner: its episodes in flight, per env copy and agent.

:class:`MultiAgentRunnerState` extends :class:`~cairn.rl.env.runner_state.EnvRunnerState`
(counters, RNG, episode windows, the check-before-apply order) with what
:class:`~cairn.rl.env.multi_agent_env_runner.MultiAgentEnvRunner` keeps of each episode:
observations, agent-to-module mappings, pending rows, returns, the stateful modules' memory
per agent, and the connectors' per-row histories.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from cairn.errors import IncompatibleCheckpointError
from cairn.rl.core.rl_module.rl_module import RLModuleSpec
from cairn.rl.env.env_state import (
    env_state_mismatch,
    env_state_problem,
    get_env_state,
    set_env_state,
)
from cairn.rl.env.module_pipelines import ModulePipelines
from cairn.rl.env.module_spaces import check_agent_ids
from cairn.rl.env.multi_agent_env import AgentID, MultiAgentEnv, Spaces
from cairn.rl.env.multi_agent_game_hooks import GameEpisodes
from cairn.rl.env.runner_state import EnvRunnerState, _is_int
from cairn.rl.env.runner_state_checks import layout_problem, module_memory, runner_local_states
from cairn.rl.utils.nested import to_state
from cairn.state_checks import corrupt, count, number, unique
from cairn.state_checks import mapping as state_dict

__all__ = ["MultiAgentRunnerState"]


class MultiAgentRunnerState(EnvRunnerState):
    """The env state of :class:`~cairn.rl.env.multi_agent_env_runner.MultiAgentEnvRunner` (see the module docstring)."""

    # What the runner's __init__ sets, and this state reads and writes (see MultiAgentEnvRunner).
    env_to_module: ModulePipelines  # type: ignore[assignment]
    module_to_env: ModulePipelines  # type: ignore[assignment]
    module_specs: dict[str, RLModuleSpec]
    envs: list[MultiAgentEnv]
    num_envs: int
    possible_agents: list[AgentID]
    _agent_numbers: dict[tuple[type, AgentID], int]
    _extra_agents: list[AgentID]
    _force_starts: set[tuple[int, AgentID]]
    _agent_states: dict[tuple[int, AgentID], dict[str, torch.Tensor]]
    _games: GameEpisodes
    _episode_numbers: list[int]
    _mappings: list[dict[AgentID, str]]
    _pending: list[dict[AgentID, dict[str, Any]]]
    _agent_returns: list[dict[AgentID, float]]
    _agent_steps: list[dict[AgentID, int]]
    _obs_dicts: list[dict[AgentID, Any]]
    _spaces_of: Callable[[AgentID], Spaces]
    _check_spaces: Callable[[AgentID, str], None]
    _row_slot: Callable[[int, AgentID], int]

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
            state["game_episodes"] = self._games.get_state()  # the hooks' games in flight (their custom_data)
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
        games = self._games.read_state(
            env_state.get("game_episodes", [None] * self.num_envs),
            agents,
            list(self.module.keys()),
            where=f"{where}/game_episodes",
        )
        memory = self._restored_agent_states(episodes)  # the recurrent states of the agents in flight
        return {
            "sub_envs": list(sub_states),
            "rows": rows,
            "episodes": read_episodes,
            "game_episodes": games,
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
        self._games.episodes = read["game_episodes"]
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
                module, a state of other names or shapes, or an agent of a stateful module in flight without
                its state.
            CorruptCheckpointError: Non-numeric arrays, NaN or infinite values.
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
                    module_id = mapping[agent]
                    checked.setdefault(table, {})[(e, agent)] = module_memory(
                        state,
                        self._initial_states[module_id],
                        rows=(),
                        module_id=module_id,
                        where=f"{where}/{table}/{agent!r}",
                    )
        pending = {
            key: {name: value.numpy() for name, value in state.items()}
            for key, state in checked.get("pending_states", {}).items()
        }
        return checked.get("module_states", {}), pending

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


def _nested_obs(space: gym.Space[Any], saved: Any) -> Any:
    """A saved Dict/Tuple observation (checked by ``layout_problem``) in the space's structure and dtypes."""
    if isinstance(space, gym.spaces.Dict):
        return {key: _nested_obs(sub, saved[str(key)]) for key, sub in space.spaces.items()}
    if isinstance(space, gym.spaces.Tuple):
        return tuple(_nested_obs(sub, saved[i]) for i, sub in enumerate(space.spaces))
    dtype = np.int64 if isinstance(space, gym.spaces.Discrete) else (space.dtype or np.float32)
    return np.array(saved, dtype=dtype, copy=True)


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

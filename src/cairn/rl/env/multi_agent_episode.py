"""RLlib's ``MultiAgentEpisode`` (``ray.rllib.env.multi_agent_episode``): one game of a multi-agent env.

Built the RLlib way, from the env's dicts: ``add_env_reset(observations=, infos=)``, then
``add_env_step(observations, actions, rewards, infos, terminateds=, truncateds=,
extra_model_outputs=)`` per env step, or from lists of those dicts given to the
constructor (``len_lookback_buffer="auto"``: all of it is lookback, as in RLlib). Each
agent's part is a :class:`~cairn.rl.env.episodes.SingleAgentEpisode` (``agent_episodes``),
and ``env_t_to_agent_t[agent]`` maps the env's time steps to the agent's (``"S"``,
:attr:`MultiAgentEpisode.SKIP_ENV_TS_TAG`, where the agent got no observation).

RLlib's rules for agents that do not act every step:

- an agent that acts and gets no observation in that step keeps its action, module
  outputs and the rewards it gets meanwhile as *hanging* (``_hanging_actions_end``,
  ``_hanging_extra_model_outputs_end``, ``_hanging_rewards_end``) until its next
  observation, which completes the step;
- rewards an agent gets before its first observation go to ``_hanging_rewards_begin``
  (counted by ``get_return(include_hanging_rewards=True)``, not by its episode);
- an agent's first observation (at reset or later) starts its episode; an agent that
  terminates without a last observation ends on its last one.

The getters (:mod:`cairn.rl.env.multi_agent_episode_reads`) take RLlib's indices (an int, a
list, a slice or None; env or agent steps; ``fill``, ``neg_index_as_lookback``, ``agent_ids``,
``return_list``); :meth:`MultiAgentEpisode.get_state`/``from_state``, the setters and
``to_numpy`` are RLlib's too.

``slice``/``episode[a:b]`` and ``concat_episode`` are in :mod:`cairn.rl.env.multi_agent_episode_chunks`.
``env_t_to_agent_t`` holds positions in each agent's data (lookback included), RLlib's newer rule.

What differs from RLlib (docs/rllib_parity.md): :meth:`MultiAgentEpisode.cut` keeps each
running agent's episode and hanging action (RLlib's newer ``cut`` may drop an agent whose action
hangs since an older observation); the state is plain data without the mapping function and
spaces (given to ``from_state``); a refused step raises :class:`MultiAgentEpisodeError` (a
``ValueError``) where RLlib raises ``MultiAgentEnvError``; ids are deterministic (an agent's
episode is ``"<id>-<agent>"``).
"""

from __future__ import annotations

import copy
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from cairn.rl.env.episodes import SingleAgentEpisode, check_episode_data
from cairn.rl.env.lookback_buffer import LookbackBuffer
from cairn.rl.env.multi_agent_episode_chunks import EpisodeChunkOps, MultiAgentEpisodeError
from cairn.rl.env.multi_agent_episode_reads import EpisodeReads
from cairn.rl.env.multi_agent_episode_setters import EpisodeSetters

__all__ = ["EnvToAgentSteps", "MultiAgentEpisode", "MultiAgentEpisodeError"]

ALL = "__all__"


class EnvToAgentSteps(LookbackBuffer):
    """One agent's env-step -> agent-step mapping (RLlib's ``env_t_to_agent_t[agent]``).

    ``data`` holds one entry per env time step (lookback included): the position of the agent's
    observation at that env step in its episode's data (lookback included), or ``"S"`` where it
    got none; ``lookback`` counts the entries before the episode's start. ``len()`` is the
    episode's part; the getters read it with RLlib's index rules
    (:class:`~cairn.rl.env.lookback_buffer.LookbackBuffer`).
    """

    def __init__(self, data: Sequence[Any] = (), lookback: int = 0) -> None:
        super().__init__(list(data), lookback)


class MultiAgentEpisode(EpisodeReads, EpisodeSetters, EpisodeChunkOps):
    """The agents' episodes of one game, or of the chunk of it that one ``sample()`` returned.

    Args:
        id_: The game's id (a chunk from :meth:`cut` keeps it); a random hex string if not given.
        observations: Per env step (the reset's first), agent id -> observation.
        observation_space: The env's observation space (a ``Dict`` by agent id), or None.
        infos: Per env step, agent id -> info (default: none).
        actions: Per env step after the reset, agent id -> action.
        action_space: The env's action space (a ``Dict`` by agent id), or None.
        rewards: Per env step after the reset, agent id -> reward.
        terminateds: Agent id (or ``"__all__"``) -> terminated at the end of the given data, or a bool.
        truncateds: As ``terminateds``, for truncation.
        extra_model_outputs: Per env step after the reset, agent id -> the module's other outputs.
        env_t_started: The env step the episode (after its lookback) starts at (default 0).
        len_lookback_buffer: How many of the given env steps are lookback (``"auto"``: all).
        agent_t_started: Agent id -> the ``t_started`` of its episode (default 0, as in RLlib).
        agent_module_ids: Agent id -> module id (else ``agent_to_module_mapping_fn``, else None).
        agent_to_module_mapping_fn: ``fn(agent_id, episode) -> module id``, asked once per agent.

    Raises:
        MultiAgentEpisodeError: Data whose steps do not fit (see :meth:`add_env_step`).
    """

    SKIP_ENV_TS_TAG = "S"
    """``env_t_to_agent_t``'s entry where an agent got no observation."""

    def __init__(
        self,
        id_: str | None = None,
        *,
        observations: Sequence[Mapping[Any, Any]] | None = None,
        observation_space: Any = None,
        infos: Sequence[Mapping[Any, Any]] | None = None,
        actions: Sequence[Mapping[Any, Any]] | None = None,
        action_space: Any = None,
        rewards: Sequence[Mapping[Any, Any]] | None = None,
        terminateds: Mapping[Any, bool] | bool = False,
        truncateds: Mapping[Any, bool] | bool = False,
        extra_model_outputs: Sequence[Mapping[Any, Any]] | None = None,
        env_t_started: int | None = None,
        len_lookback_buffer: int | str = "auto",
        agent_t_started: Mapping[Any, int] | None = None,
        agent_module_ids: Mapping[Any, str] | None = None,
        agent_to_module_mapping_fn: Callable[[Any, MultiAgentEpisode], str] | None = None,
    ) -> None:
        self.id_ = id_ if id_ is not None else uuid.uuid4().hex
        self.observation_space = observation_space
        self.action_space = action_space
        self.agent_to_module_mapping_fn = agent_to_module_mapping_fn
        self._agent_module_ids: dict[Any, str] = dict(agent_module_ids or {})
        self.agent_episodes: dict[Any, SingleAgentEpisode] = {}
        self.env_t_to_agent_t: defaultdict[Any, EnvToAgentSteps] = defaultdict(EnvToAgentSteps)
        self.agent_t_started: defaultdict[Any, int] = defaultdict(int)
        self._hanging_actions_end: dict[Any, Any] = {}
        self._hanging_extra_model_outputs_end: dict[Any, dict[str, Any]] = {}
        self._hanging_rewards_end: defaultdict[Any, float] = defaultdict(float)
        self._hanging_rewards_begin: defaultdict[Any, float] = defaultdict(float)
        self.custom_data: dict[str, Any] = {}
        # Wall-clock times (time.perf_counter()) of the reset and the latest step, as RLlib keeps them.
        self._start_time: float | None = None
        self._last_step_time: float | None = None
        self._is_numpy = False
        self.is_terminated = False
        self.is_truncated = False
        self.env_t_started = int(env_t_started or 0)
        self.env_t = self.env_t_started
        self._len_lookback_buffers = 0
        if observations:
            self._replay(
                observations, infos, actions, rewards, extra_model_outputs, len_lookback_buffer, agent_t_started
            )
        self._end_flags(terminateds, truncateds)

    # ------------------------------------------------------------------ construction from lists

    def _replay(
        self,
        observations: Sequence[Mapping[Any, Any]],
        infos: Sequence[Mapping[Any, Any]] | None,
        actions: Sequence[Mapping[Any, Any]] | None,
        rewards: Sequence[Mapping[Any, Any]] | None,
        extra: Sequence[Mapping[Any, Any]] | None,
        len_lookback_buffer: int | str,
        agent_t_started: Mapping[Any, int] | None,
    ) -> None:
        """Record the given dicts step by step, then make the first ``len_lookback_buffer`` steps lookback."""
        steps = len(observations) - 1
        actions, rewards = list(actions or []), list(rewards or [])
        if len(actions) != steps or len(rewards) != steps or (infos is not None and len(infos) != steps + 1):
            raise MultiAgentEpisodeError(
                f"MultiAgentEpisode {self.id_!r}: {len(observations)} observation dicts, {len(actions)} action and "
                f"{len(rewards)} reward dicts: give one more observation dict (the reset's) than actions and rewards."
            )
        if len_lookback_buffer == "auto":
            lookback = steps
        elif isinstance(len_lookback_buffer, int) and not isinstance(len_lookback_buffer, bool):
            lookback = min(max(len_lookback_buffer, 0), steps)
        else:
            raise MultiAgentEpisodeError(f"len_lookback_buffer={len_lookback_buffer!r:.40} must be an int or 'auto'.")
        started = self.env_t_started
        self.env_t_started = self.env_t = 0
        self.add_env_reset(observations=observations[0], infos=infos[0] if infos else None)
        for t in range(steps):
            self.add_env_step(
                observations[t + 1],
                actions[t],
                rewards[t],
                infos[t + 1] if infos else None,
                extra_model_outputs=extra[t] if extra else None,
            )
        self._len_lookback_buffers = lookback
        for agent, mapping in self.env_t_to_agent_t.items():
            mapping.lookback = lookback
            episode = self.agent_episodes.get(agent)
            if episode is not None:
                # RLlib's rule: the agent's observations in the lookback env steps are its lookback (at most
                # all its steps: its latest observation starts its episode).
                seen = sum(v != self.SKIP_ENV_TS_TAG for v in mapping.data[:lookback])
                agent_lookback = min(seen, len(episode._rewards))
                episode._lookback = agent_lookback
                episode._length -= agent_lookback
                episode._return = float(sum(episode._rewards[agent_lookback:]))
                t_started = 0 if agent_t_started is None else agent_t_started.get(agent, 0)  # RLlib's default
                episode.t_started = self.agent_t_started[agent] = t_started
        self.env_t_started = started
        # A built episode has no wall-clock times (RLlib's constructor sets none), nor have its agents'.
        self._start_time = self._last_step_time = None
        for built in self.agent_episodes.values():
            built._start_time = built._last_step_time = None
        self.env_t = started + steps - lookback

    def _end_flags(self, terminateds: Mapping[Any, bool] | bool, truncateds: Mapping[Any, bool] | bool) -> None:
        """Apply the constructor's end flags (per agent, and ``"__all__"`` or a bool for the game)."""
        for flags, attr in ((terminateds, "is_terminated"), (truncateds, "is_truncated")):
            if isinstance(flags, Mapping):
                for agent, flag in flags.items():
                    if agent == ALL:
                        setattr(self, attr, bool(flag))
                    elif flag and agent in self.agent_episodes:
                        setattr(self.agent_episodes[agent], attr, True)
            else:
                setattr(self, attr, bool(flags))

    # ------------------------------------------------------------------ recording

    def module_for(self, agent_id: Any) -> str | None:
        """The module that acts for ``agent_id`` in this game (given, or asked of the mapping function once)."""
        if agent_id not in self._agent_module_ids and self.agent_to_module_mapping_fn is not None:
            self._agent_module_ids[agent_id] = self.agent_to_module_mapping_fn(agent_id, self)
        return self._agent_module_ids.get(agent_id)

    def set_module_for(self, agent_id: Any, module_id: str) -> None:
        """``agent_id`` acts with ``module_id`` from now on (an env runner re-maps an agent whose module was
        removed mid-game); its agent episode says so too."""
        self._agent_module_ids[agent_id] = module_id
        if agent_id in self.agent_episodes:
            self.agent_episodes[agent_id].module_id = module_id

    def _new_agent(self, agent: Any, observation: Any, info: Mapping[str, Any] | None) -> None:
        episode = SingleAgentEpisode(
            f"{self.id_}-{agent}",
            agent_id=agent,
            module_id=self.module_for(agent),
            multi_agent_episode_id=self.id_,
            observation_space=_space_of(self.observation_space, agent),
            action_space=_space_of(self.action_space, agent),
        )
        episode.add_env_reset(observation, info)
        self.agent_episodes[agent] = episode

    def add_env_reset(self, *, observations: Mapping[Any, Any], infos: Mapping[Any, Any] | None = None) -> None:
        """Record what ``env.reset()`` returned (RLlib's ``add_env_reset``).

        Raises:
            MultiAgentEpisodeError: The episode already has steps or is done.
        """
        if self.is_done or self.env_t != self.env_t_started or self.agent_episodes:
            raise MultiAgentEpisodeError(f"MultiAgentEpisode {self.id_!r} has data: add_env_reset starts a new one.")
        infos = infos or {}
        self._start_time = time.perf_counter()
        for agent, observation in observations.items():
            self.env_t_to_agent_t[agent].append(0)
            self._new_agent(agent, observation, infos.get(agent))

    def add_env_step(
        self,
        observations: Mapping[Any, Any],
        actions: Mapping[Any, Any],
        rewards: Mapping[Any, Any],
        infos: Mapping[Any, Any] | None = None,
        *,
        terminateds: Mapping[Any, bool] | None = None,
        truncateds: Mapping[Any, bool] | None = None,
        extra_model_outputs: Mapping[Any, Mapping[str, Any]] | None = None,
    ) -> None:
        """Record one env step (RLlib's ``add_env_step``; the module docstring has the rules).

        Raises:
            MultiAgentEpisodeError: The game is done; data for an agent whose episode is done; an agent
                that acted and got its next observation but no reward; an agent truncated after acting
                without a last observation; an observation for an agent that did not act on its last one.
                Agents are recorded one by one (as RLlib's asserts do), so a refused step leaves the episode
                partway updated: discard it.
        """
        if self.is_done or self._is_numpy:
            raise MultiAgentEpisodeError(
                f"MultiAgentEpisode {self.id_!r} is {'done' if self.is_done else 'numpy-ized (to_numpy())'}: no step "
                "can be added."
            )
        infos, terminateds, truncateds = infos or {}, terminateds or {}, truncateds or {}
        extra = extra_model_outputs or {}
        self.env_t += 1
        self._last_step_time = time.perf_counter()
        if self._start_time is None:
            self._start_time = self._last_step_time
        self.is_terminated = bool(terminateds.get(ALL, False))
        self.is_truncated = bool(truncateds.get(ALL, False))
        for agent, mapping in self.env_t_to_agent_t.items():
            if agent not in observations:
                mapping.append(self.SKIP_ENV_TS_TAG)
        everyone: list[Any] = list(self.agent_episodes) if self.is_done else []
        keys = [*observations, *actions, *rewards, *terminateds, *truncateds, *everyone]
        for agent in dict.fromkeys(key for key in keys if key != ALL):
            self._step_agent(
                agent,
                observations,
                actions,
                rewards,
                infos.get(agent),
                terminated=bool(terminateds.get(agent, False)) or self.is_terminated,
                truncated=bool(truncateds.get(agent, False)) or self.is_truncated,
                extra=extra.get(agent),
            )
        if self.agent_episodes and all(episode.is_done for episode in self.agent_episodes.values()):
            self.is_terminated = self.is_terminated or not self.is_truncated

    def _step_agent(
        self,
        agent: Any,
        observations: Mapping[Any, Any],
        actions: Mapping[Any, Any],
        rewards: Mapping[Any, Any],
        info: Mapping[str, Any] | None,
        *,
        terminated: bool,
        truncated: bool,
        extra: Mapping[str, Any] | None,
    ) -> None:
        episode = self.agent_episodes.get(agent)
        observation, action = observations.get(agent), actions.get(agent)
        reward = float(rewards.get(agent) or 0.0)
        if episode is not None and episode.is_done and (observation is not None or action is not None):
            raise MultiAgentEpisodeError(f"Agent {agent!r}'s episode is done, but it got data in a later step.")
        if episode is None and action is not None:
            raise MultiAgentEpisodeError(f"Agent {agent!r} acted before its first observation.")
        if observation is not None and action is not None:
            if agent not in rewards:
                raise MultiAgentEpisodeError(f"Agent {agent!r} acted and got its next observation, but no reward.")
        elif observation is not None:  # its first observation, or the one that completes a hanging action
            if agent not in self._hanging_actions_end:
                if terminated or truncated:
                    self._drop_hanging(agent)
                elif episode is not None:
                    raise MultiAgentEpisodeError(
                        f"Agent {agent!r} got an observation but did not act on its previous one."
                    )
                else:
                    # One entry per env step of the chunk's data (lookback included), as the other agents have.
                    skipped = self._len_lookback_buffers + len(self)
                    self.env_t_to_agent_t[agent].extend([self.SKIP_ENV_TS_TAG] * skipped + [0])
                    self.env_t_to_agent_t[agent].lookback = self._len_lookback_buffers
                    self._new_agent(agent, observation, info)
                    self._hanging_rewards_begin[agent] += reward
                return
            action = self._hanging_actions_end.pop(agent)
            extra = self._hanging_extra_model_outputs_end.pop(agent, {})
            reward += self._hanging_rewards_end.pop(agent, 0.0)
        elif action is not None:  # it acted, and gets no observation (yet)
            if truncated:
                raise MultiAgentEpisodeError(f"Agent {agent!r} acted and was truncated without a last observation.")
            if not terminated:
                if agent in self._hanging_actions_end:
                    raise MultiAgentEpisodeError(f"Agent {agent!r} acted twice without an observation in between.")
                self._hanging_actions_end[agent] = action
                self._hanging_rewards_end[agent] = reward
                self._hanging_extra_model_outputs_end[agent] = dict(extra or {})
                return
            assert episode is not None  # an agent that acted got an observation first
            observation, info = episode.get_observations(-1), episode.get_infos(-1)
        else:  # a reward or an end flag only
            if not (terminated or truncated):
                hanging = self._hanging_rewards_end if episode is not None else self._hanging_rewards_begin
                hanging[agent] += reward
                return
            if agent not in self._hanging_actions_end:
                self._drop_hanging(agent)
                return
            if truncated:
                raise MultiAgentEpisodeError(f"Agent {agent!r} acted and was truncated without a last observation.")
            assert episode is not None
            observation, info = episode.get_observations(-1), episode.get_infos(-1)
            action = self._hanging_actions_end.pop(agent)
            extra = self._hanging_extra_model_outputs_end.pop(agent, {})
            reward += self._hanging_rewards_end.pop(agent, 0.0)
        assert episode is not None  # every path that gets here had the agent's first observation
        episode.add_env_step(
            observation, action, reward, info, terminated=terminated, truncated=truncated, extra_model_outputs=extra
        )
        # The mapping holds positions in the agent's data (lookback included), as RLlib's does.
        self.env_t_to_agent_t[agent].append(len(episode._observations) - 1)
        if terminated or truncated:
            self._drop_hanging(agent)

    def _drop_hanging(self, agent: Any) -> None:
        for cache in (self._hanging_actions_end, self._hanging_extra_model_outputs_end, self._hanging_rewards_end):
            cache.pop(agent, None)

    # ------------------------------------------------------------------ reading

    @property
    def is_reset(self) -> bool:
        """Whether the game has its reset's observations."""
        return bool(self.agent_episodes)

    @property
    def agent_ids(self) -> set[Any]:
        """The agents that have an episode in this game (chunk)."""
        return set(self.agent_episodes)

    @property
    def agent_episode_ids(self) -> dict[Any, str]:
        """Agent id -> the id of its episode (RLlib's ``agent_episode_ids``)."""
        return {agent: episode.id_ for agent, episode in self.agent_episodes.items()}

    def get_agents_that_stepped(self) -> set[Any]:
        """The agents that got an observation in the latest env step (RLlib's)."""
        return set(self.get_observations(-1))

    def get_agents_to_act(self) -> set[Any]:
        """The agents that got an observation in the latest env step and are not done: those to act next."""
        return {agent for agent in self.get_observations(-1) if not self.agent_episodes[agent].is_done}

    def env_steps(self) -> int:
        """The env steps of this chunk (``len(episode)``)."""
        return len(self)

    def agent_steps(self) -> int:
        """The agent steps of this chunk: the sum of its agents' steps (RLlib's ``agent_steps()``)."""
        return sum(len(episode) for episode in self.agent_episodes.values())

    def get_return(self, include_hanging_rewards: bool = False) -> float:
        """The sum of the agents' returns (and, with ``include_hanging_rewards``, the rewards still hanging)."""
        total = sum(episode.get_return() for episode in self.agent_episodes.values())
        if include_hanging_rewards:
            total += sum(self._hanging_rewards_begin.values()) + sum(self._hanging_rewards_end.values())
        return float(total)

    def get_terminateds(self) -> dict[Any, bool]:
        """Agent id -> terminated, and ``"__all__"``."""
        return {**{agent: e.is_terminated for agent, e in self.agent_episodes.items()}, ALL: self.is_terminated}

    def get_truncateds(self) -> dict[Any, bool]:
        """Agent id -> truncated, and ``"__all__"``."""
        return {**{agent: e.is_truncated for agent, e in self.agent_episodes.items()}, ALL: self.is_truncated}

    # ------------------------------------------------------------------ chunks

    def cut(self, len_lookback_buffer: int = 0) -> MultiAgentEpisode:
        """The chunk that continues this game (RLlib's ``cut``): same ``id_``, no steps yet, each running
        agent's episode cut after its last observation, the hanging actions and rewards and a copy of
        ``custom_data`` carried over.

        The chunk's env lookback is ``len_lookback_buffer`` env steps, or more where an agent's hanging
        action was chosen on an older observation (so that its step can complete in the chunk).
        """
        if len_lookback_buffer < 0:
            raise MultiAgentEpisodeError(f"len_lookback_buffer={len_lookback_buffer} must be >= 0.")
        successor = MultiAgentEpisode(
            self.id_,
            observation_space=self.observation_space,
            action_space=self.action_space,
            env_t_started=self.env_t,
            agent_module_ids=self._agent_module_ids,
            agent_to_module_mapping_fn=self.agent_to_module_mapping_fn,
        )
        running = {agent: episode for agent, episode in self.agent_episodes.items() if not episode.is_done}
        lookback = len_lookback_buffer
        for agent in running:
            if agent in self._hanging_actions_end:
                data = self.env_t_to_agent_t[agent].data
                last = max(i for i, v in enumerate(data) if v != self.SKIP_ENV_TS_TAG)
                lookback = max(lookback, len(data) - 1 - last)
        for agent, episode in running.items():
            window = self.env_t_to_agent_t[agent].data[-(lookback + 1) :]
            steps = [int(v) for v in window if v != self.SKIP_ENV_TS_TAG]
            cut = episode.cut(len_lookback_buffer=steps[-1] - steps[0] if steps else 0)
            successor.agent_episodes[agent] = cut
            # Positions in the chunk's data: the agent's data before the chunk's lookback is gone.
            dropped = len(episode._observations) - len(cut._observations)
            window = [v if v == self.SKIP_ENV_TS_TAG else int(v) - dropped for v in window]
            successor.env_t_to_agent_t[agent] = EnvToAgentSteps(window, lookback)
            successor.agent_t_started[agent] = episode.t
            if agent in self._hanging_actions_end:
                successor._hanging_actions_end[agent] = self._hanging_actions_end[agent]
                successor._hanging_extra_model_outputs_end[agent] = dict(self._hanging_extra_model_outputs_end[agent])
                successor._hanging_rewards_end[agent] = self._hanging_rewards_end[agent]
        for agent, reward in self._hanging_rewards_begin.items():
            if agent not in self.agent_episodes:
                successor._hanging_rewards_begin[agent] = reward
        successor._len_lookback_buffers = lookback
        successor.custom_data = copy.deepcopy(self.custom_data)  # the game's data continues (RLlib's cut)
        return successor

    def get_duration_s(self) -> float:
        """Seconds from the reset (or the first step added) to the latest step (RLlib's ``get_duration_s``)."""
        if self._start_time is None or self._last_step_time is None:
            return 0.0
        return self._last_step_time - self._start_time

    # ------------------------------------------------------------------ state

    def get_state(self) -> dict[str, Any]:
        """The episode as plain data (RLlib's ``get_state``): ids, time steps, mappings, hanging values,
        flags, the agents' episodes, ``custom_data`` and the wall-clock times.

        Left out (cairn keeps a state free of pickled objects): ``agent_to_module_mapping_fn`` and the
        spaces; :meth:`from_state` takes them as arguments. Agent ids are kept as given (str or int),
        so maps are lists of ``[agent, value]`` pairs.

        Raises:
            TypeError: A hanging value, ``custom_data`` or an agent's data is not plain data (the
                message names it).
        """
        where = f"MultiAgentEpisode {self.id_!r}"
        hanging = {
            "hanging_actions_end": self._hanging_actions_end,
            "hanging_extra_model_outputs_end": self._hanging_extra_model_outputs_end,
            "hanging_rewards_end": self._hanging_rewards_end,
            "hanging_rewards_begin": self._hanging_rewards_begin,
        }
        state: dict[str, Any] = {name: [[a, v] for a, v in cache.items()] for name, cache in hanging.items()}
        check_episode_data(state, where=f"{where}: hanging values")
        check_episode_data(self.custom_data, where=f"{where}: custom_data")
        state.update(
            {
                "id": self.id_,
                "agent_module_ids": [[a, m] for a, m in self._agent_module_ids.items()],
                "env_t_started": self.env_t_started,
                "env_t": self.env_t,
                "len_lookback_buffers": self._len_lookback_buffers,
                "agent_t_started": [[a, t] for a, t in self.agent_t_started.items()],
                "env_t_to_agent_t": [[a, list(m.data), m.lookback] for a, m in self.env_t_to_agent_t.items()],
                "is_terminated": self.is_terminated,
                "is_truncated": self.is_truncated,
                "agent_episodes": [[a, e.get_state()] for a, e in self.agent_episodes.items()],
                "custom_data": copy.deepcopy(self.custom_data),
                "start_time": self._start_time,
                "last_step_time": self._last_step_time,
            }
        )
        return state

    @classmethod
    def from_state(
        cls,
        state: Mapping[str, Any],
        *,
        observation_space: Any = None,
        action_space: Any = None,
        agent_to_module_mapping_fn: Callable[[Any, MultiAgentEpisode], str] | None = None,
    ) -> MultiAgentEpisode:
        """The episode :meth:`get_state` recorded (with the spaces and mapping function given here).

        Raises:
            ValueError: ``state`` is not a multi-agent episode's state.
        """
        try:
            episode = cls(
                str(state["id"]),
                observation_space=observation_space,
                action_space=action_space,
                agent_module_ids={a: str(m) for a, m in state["agent_module_ids"]},
                agent_to_module_mapping_fn=agent_to_module_mapping_fn,
            )
            episode.env_t_started, episode.env_t = int(state["env_t_started"]), int(state["env_t"])
            episode._len_lookback_buffers = int(state["len_lookback_buffers"])
            episode.agent_t_started.update({a: int(t) for a, t in state["agent_t_started"]})
            for agent, data, lookback in state["env_t_to_agent_t"]:
                episode.env_t_to_agent_t[agent] = EnvToAgentSteps(list(data), int(lookback))
            episode._hanging_actions_end = {a: v for a, v in state["hanging_actions_end"]}
            episode._hanging_extra_model_outputs_end = {a: dict(v) for a, v in state["hanging_extra_model_outputs_end"]}
            episode._hanging_rewards_end.update({a: float(v) for a, v in state["hanging_rewards_end"]})
            episode._hanging_rewards_begin.update({a: float(v) for a, v in state["hanging_rewards_begin"]})
            episode.is_terminated, episode.is_truncated = bool(state["is_terminated"]), bool(state["is_truncated"])
            episode.agent_episodes = {a: SingleAgentEpisode.from_state(s) for a, s in state["agent_episodes"]}
            episode.custom_data = dict(state["custom_data"])
            times = state["start_time"], state["last_step_time"]
            episode._start_time, episode._last_step_time = (None if t is None else float(t) for t in times)
            if episode.env_t < episode.env_t_started:
                raise ValueError(f"env_t {episode.env_t} is before env_t_started {episode.env_t_started}")
        except (KeyError, TypeError, ValueError) as err:
            raise ValueError(f"not a multi-agent episode's state ({type(err).__name__}: {err})") from err
        return episode

    def __repr__(self) -> str:
        return (
            f"MultiAgentEpisode({self.id_!r}, env_t_started={self.env_t_started}, len={len(self)}, "
            f"agents={sorted(map(str, self.agent_episodes))}, done={self.is_done})"
        )


def _space_of(space: Any, agent: Any) -> Any:
    """An agent's space from the env's ``Dict`` (or dict) space; None otherwise."""
    spaces = getattr(space, "spaces", space)
    return spaces.get(agent) if isinstance(spaces, Mapping) else None

"""RLlib's chunk operations of a ``MultiAgentEpisode``: ``slice`` / ``episode[a:b]`` and ``concat_episode``.

A slice is built as RLlib builds it: the getters' per-env-step lists of the chunk (with its
lookback) go to a new episode with the same id. ``concat_episode`` appends the chunk that
follows, agent by agent, completing a step whose action hangs at the end of the first chunk
with the agent's first observation in the second. Slicing an episode into chunks and
concatenating them again gives back its data, mappings and hanging values
(``tests/rl/test_rl_multi_agent_episode.py``).

This module imports nothing of ``cairn.rl``.
"""

from __future__ import annotations

import builtins
import copy
from collections.abc import Callable
from typing import Any, Self, cast

__all__ = ["ALL", "SKIP", "EpisodeChunkOps", "MultiAgentEpisodeError"]

ALL = "__all__"
SKIP = "S"


class MultiAgentEpisodeError(ValueError):
    """A step or chunk operation that does not fit the episode (data for a done agent, a missing reward, chunks
    that do not follow each other, ...)."""


class EpisodeChunkOps:
    """``slice``, ``__getitem__`` and ``concat_episode``, mixed into
    :class:`~cairn.rl.env.multi_agent_episode.MultiAgentEpisode` (see the module)."""

    id_: str
    env_t: int
    env_t_started: int
    is_terminated: bool
    is_truncated: bool
    observation_space: Any
    action_space: Any
    custom_data: dict[str, Any]
    agent_episodes: dict[Any, Any]
    env_t_to_agent_t: Any
    agent_t_started: Any
    agent_to_module_mapping_fn: Callable[..., str] | None
    _agent_module_ids: dict[Any, str]
    _len_lookback_buffers: int
    _is_numpy: bool
    _hanging_actions_end: dict[Any, Any]
    _hanging_extra_model_outputs_end: dict[Any, dict[str, Any]]
    _hanging_rewards_end: Any
    _hanging_rewards_begin: Any
    get_observations: Callable[..., Any]
    get_infos: Callable[..., Any]
    get_actions: Callable[..., Any]
    get_rewards: Callable[..., Any]
    get_extra_model_outputs: Callable[..., Any]
    to_numpy: Callable[[], Any]

    @property
    def is_done(self) -> bool:
        """Whether the game ended (terminated or truncated)."""
        return self.is_terminated or self.is_truncated

    def __len__(self) -> int:
        """The env steps of this chunk (lookback excluded)."""
        return self.env_t - self.env_t_started

    def slice(self, slice_: builtins.slice, *, len_lookback_buffer: int | None = None) -> Self:
        """The chunk of env steps ``slice_`` selects (RLlib's ``slice``; ``episode[a:b]`` is the same).

        Built as RLlib builds it: the chunk's observations, actions, rewards and model outputs (read
        with the getters, ``len_lookback_buffer`` env steps before it as lookback: default the
        episode's own) go to a new episode with the same id; an agent keeps its end flags only where
        the chunk reaches its last observation, and its ``t_started`` is its first step in the chunk.

        Raises:
            MultiAgentEpisodeError: A step other than 1, or a negative ``len_lookback_buffer``.
        """
        if slice_.step not in (None, 1):
            raise MultiAgentEpisodeError(f"An episode slice takes step 1 (got {slice_.step}).")
        start, stop = _bounds(slice_.start, 0, len(self)), _bounds(slice_.stop, len(self), len(self))
        terminateds: dict[Any, bool] = {}
        truncateds: dict[Any, bool] = {}
        agent_t_started: dict[Any, int] = {}
        for agent, episode in self.agent_episodes.items():
            mapping = self.env_t_to_agent_t[agent]
            seen = [i for i in range(len(mapping)) if mapping[i] != SKIP]
            # It ends in the chunk where the chunk reaches its last observation (RLlib infers the end of an
            # agent that observes and does not act before the data's end; the same agents).
            if episode.is_done and seen and seen[-1] <= stop:
                terminateds[agent], truncateds[agent] = episode.is_terminated, episode.is_truncated
            firsts = [i for i in seen if i >= start]
            if firsts:
                agent_t_started[agent] = int(mapping[firsts[0]])
        terminateds[ALL] = all(terminateds.get(agent) for agent in self.agent_episodes)
        truncateds[ALL] = all(truncateds.get(agent) for agent in self.agent_episodes)
        own = self._len_lookback_buffers
        lookback = own if len_lookback_buffer is None else int(len_lookback_buffer)
        if lookback < 0:
            raise MultiAgentEpisodeError(f"len_lookback_buffer={lookback} must be >= 0.")
        lookback = min(lookback, own + start)
        steps, obs_steps = slice(start - lookback, stop), slice(start - lookback, stop + 1)
        extra = self._extra_as_list(steps)
        chunk: Self = cast(Any, type(self))(
            self.id_,
            observations=self.get_observations(obs_steps, neg_index_as_lookback=True, return_list=True),
            observation_space=self.observation_space,
            infos=self.get_infos(obs_steps, neg_index_as_lookback=True, return_list=True),
            actions=self.get_actions(steps, neg_index_as_lookback=True, return_list=True),
            action_space=self.action_space,
            rewards=self.get_rewards(steps, neg_index_as_lookback=True, return_list=True),
            extra_model_outputs=extra,
            terminateds=terminateds,
            truncateds=truncateds,
            env_t_started=self.env_t_started + start,
            len_lookback_buffer=lookback,
            agent_t_started=agent_t_started,
            agent_module_ids=self._agent_module_ids,
            agent_to_module_mapping_fn=self.agent_to_module_mapping_fn,
        )
        if self._is_numpy:
            chunk.to_numpy()
        return chunk

    def concat_episode(self, other: Self) -> None:
        """Append ``other``, the chunk that continues this one (RLlib's ``concat_episode``).

        Each agent's episode takes its part of ``other``; an agent whose action hangs here and whose
        next observation is in ``other`` completes that step first (its hanging reward, and the rewards
        ``other`` holds for it before that observation, are the step's). An agent new in ``other``
        joins with its episode; ``other``'s hanging values carry over.

        Raises:
            MultiAgentEpisodeError: ``other`` has another id, this chunk is done, or ``other`` does not
                start at this chunk's ``env_t`` (nothing is changed then).
            EpisodeError: An agent's episodes do not follow each other (their ``t`` and ``t_started``
                or model output keys differ); agents are appended one by one, so discard this episode.
        """
        if other.id_ != self.id_:
            raise MultiAgentEpisodeError(f"MultiAgentEpisode {self.id_!r} cannot take a chunk of {other.id_!r}.")
        if self.is_done:
            raise MultiAgentEpisodeError(f"MultiAgentEpisode {self.id_!r} is done: no chunk can follow it.")
        if other.env_t_started != self.env_t:
            raise MultiAgentEpisodeError(
                f"MultiAgentEpisode {self.id_!r} ends at env_t={self.env_t}; the chunk starts at "
                f"env_t={other.env_t_started}: chunks must follow each other."
            )
        steps = self._len_lookback_buffers + len(self)  # this chunk's mapping entries before its last one
        for agent in dict.fromkeys([*self.agent_episodes, *other.agent_episodes]):
            mine, theirs = self.agent_episodes.get(agent), other.agent_episodes.get(agent)
            if theirs is None or (mine is not None and mine.is_done):
                continue
            tail = other.env_t_to_agent_t[agent].data[other.env_t_to_agent_t[agent].lookback + 1 :]
            if mine is None:
                self.agent_episodes[agent] = theirs
                self.agent_t_started[agent] = other.agent_t_started[agent]
                first = other.env_t_to_agent_t[agent].data[other.env_t_to_agent_t[agent].lookback :][:1]
                skipped = steps + 1 - len(self.env_t_to_agent_t[agent].data) - len(first)
                self.env_t_to_agent_t[agent].extend([SKIP] * max(skipped, 0) + first + tail)
                self.env_t_to_agent_t[agent].lookback = self._len_lookback_buffers
            else:
                if agent in self._hanging_actions_end and theirs._lookback < len(theirs._observations):
                    first_obs, first_info = theirs._observations[theirs._lookback], theirs._infos[theirs._lookback]
                    reward = self._hanging_rewards_end.pop(agent, 0.0) + other._hanging_rewards_begin.get(agent, 0.0)
                    mine.add_env_step(
                        first_obs,
                        self._hanging_actions_end.pop(agent),
                        reward,
                        first_info,
                        extra_model_outputs=self._hanging_extra_model_outputs_end.pop(agent, {}),
                    )
                shift = len(mine._observations) - 1 - theirs._lookback
                mine.concat_episode(theirs)
                self.env_t_to_agent_t[agent].extend([v if v == SKIP else int(v) + shift for v in tail])
            if agent in other._hanging_actions_end:
                self._hanging_actions_end[agent] = copy.deepcopy(other._hanging_actions_end[agent])
                extra = other._hanging_extra_model_outputs_end.get(agent, {})
                self._hanging_extra_model_outputs_end[agent] = copy.deepcopy(extra)
                self._hanging_rewards_end[agent] = other._hanging_rewards_end.get(agent, 0.0)
        for mapping in self.env_t_to_agent_t.values():
            # Agents without data in ``other`` get skips for its steps (one entry per env step).
            mapping.extend([SKIP] * (steps + len(other) + 1 - len(mapping.data)))
        self.env_t = other.env_t
        self.is_terminated, self.is_truncated = other.is_terminated, other.is_truncated
        self.custom_data.update(other.custom_data)

    def __getitem__(self, item: builtins.slice) -> Self:
        if not isinstance(item, builtins.slice):
            raise TypeError(f"episode[...] takes a slice of env steps (got {type(item).__name__}); use the getters.")
        return self.slice(item)

    def _extra_as_list(self, steps: builtins.slice) -> list[dict[Any, dict[str, Any]]]:
        """Per env step of ``steps``, agent id -> its model outputs (every key) of the step it took there."""
        keys = {key for episode in self.agent_episodes.values() for key in episode._extra}
        keys |= {key for outputs in self._hanging_extra_model_outputs_end.values() for key in outputs}
        rows: list[dict[Any, dict[str, Any]]] = []
        for key in sorted(keys):
            per_key = self.get_extra_model_outputs(key, steps, neg_index_as_lookback=True, return_list=True)
            rows = rows or [{} for _ in per_key]
            for row, values in zip(rows, per_key, strict=True):
                for agent, value in values.items():
                    row.setdefault(agent, {})[key] = value
        if not rows:
            actions = self.get_actions(steps, neg_index_as_lookback=True, return_list=True)
            rows = [{agent: {} for agent in step} for step in actions]
        return rows


def _bounds(value: int | None, default: int, length: int) -> int:
    """A slice bound within ``length`` env steps, Python's way (negative from the end, clipped)."""
    if value is None:
        return default
    return min(max(value if value >= 0 else length + value, 0), length)

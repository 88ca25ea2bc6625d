"""RLlib's getters of a ``MultiAgentEpisode``: ``get_observations``, ``get_infos``, ``get_actions``,
``get_rewards``, ``get_extra_model_outputs``, with RLlib 2.60's index rules.

``indices`` (an int, a list of ints, a slice, or None for the episode's part) count env steps
(``env_steps=True``, default) through each agent's ``env_t_to_agent_t`` mapping, or the agent's
own steps (``env_steps=False``); ``neg_index_as_lookback`` and ``fill`` read as in
:class:`~cairn.rl.env.lookback_buffer.LookbackBuffer`. The result maps agent id -> value (an
agent without data there is left out, unless ``fill`` stands in), or with ``return_list=True``
(env steps only) is one dict per index. An agent's action, reward or model output that is still
hanging (chosen, its next observation not yet in) is its latest: index ``-1`` returns it.

This module imports nothing of ``cairn.rl`` but :mod:`cairn.rl.env.lookback_buffer` and
:mod:`cairn.rl.env.episode_chunks`.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from cairn.rl.env.episode_chunks import as_array
from cairn.rl.env.lookback_buffer import Indices, LookbackBuffer

__all__ = ["EpisodeReads", "wanted_agents"]

SKIP = "S"
STEP_DATA = ("actions", "rewards", "extra_model_outputs")  # one per step: the mapping's last entry has none yet


def wanted_agents(agent_ids: Collection[Any] | Any, every: Collection[Any]) -> set[Any]:
    """RLlib's ``agent_ids`` argument: one id, a collection of ids, or None (every agent in ``every``)."""
    if agent_ids is None:
        return set(every)
    if isinstance(agent_ids, list | tuple | set | frozenset):
        return set(agent_ids) or set(every)
    return {agent_ids}


class EpisodeReads:
    """The getters, mixed into :class:`~cairn.rl.env.multi_agent_episode.MultiAgentEpisode` (see the module)."""

    agent_episodes: dict[Any, Any]
    env_t_to_agent_t: Mapping[Any, LookbackBuffer]
    agent_t_started: Mapping[Any, int]
    _hanging_actions_end: dict[Any, Any]
    _hanging_rewards_end: Mapping[Any, float]
    _hanging_extra_model_outputs_end: dict[Any, dict[str, Any]]

    def get_observations(
        self,
        indices: Indices = None,
        agent_ids: Collection[Any] | Any = None,
        *,
        env_steps: bool = True,
        neg_index_as_lookback: bool = False,
        fill: Any = None,
        return_list: bool = False,
    ) -> Any:
        """The agents' observations at ``indices`` (see the module).

        Raises:
            IndexError: An int index outside the data, without ``fill``.
            ValueError: ``return_list=True`` with ``env_steps=False``.
        """
        return self._read("observations", indices, agent_ids, env_steps, neg_index_as_lookback, fill, return_list)

    def get_infos(
        self,
        indices: Indices = None,
        agent_ids: Collection[Any] | Any = None,
        *,
        env_steps: bool = True,
        neg_index_as_lookback: bool = False,
        fill: Any = None,
        return_list: bool = False,
    ) -> Any:
        """The agents' infos at ``indices`` (see :meth:`get_observations`)."""
        return self._read("infos", indices, agent_ids, env_steps, neg_index_as_lookback, fill, return_list)

    def get_actions(
        self,
        indices: Indices = None,
        agent_ids: Collection[Any] | Any = None,
        *,
        env_steps: bool = True,
        neg_index_as_lookback: bool = False,
        fill: Any = None,
        return_list: bool = False,
    ) -> Any:
        """The agents' actions at ``indices`` (hanging ones included; see :meth:`get_observations`)."""
        return self._read("actions", indices, agent_ids, env_steps, neg_index_as_lookback, fill, return_list)

    def get_rewards(
        self,
        indices: Indices = None,
        agent_ids: Collection[Any] | Any = None,
        *,
        env_steps: bool = True,
        neg_index_as_lookback: bool = False,
        fill: Any = None,
        return_list: bool = False,
    ) -> Any:
        """The agents' rewards at ``indices`` (hanging ones included; see :meth:`get_observations`)."""
        return self._read("rewards", indices, agent_ids, env_steps, neg_index_as_lookback, fill, return_list)

    def get_extra_model_outputs(
        self,
        key: str,
        indices: Indices = None,
        agent_ids: Collection[Any] | Any = None,
        *,
        env_steps: bool = True,
        neg_index_as_lookback: bool = False,
        fill: Any = None,
        return_list: bool = False,
    ) -> Any:
        """The agents' extra model output ``key`` at ``indices`` (agents without it are left out)."""
        return self._read(
            "extra_model_outputs", indices, agent_ids, env_steps, neg_index_as_lookback, fill, return_list, key=key
        )

    # ------------------------------------------------------------------ internals

    def _buffer(self, agent: Any, what: str, key: str | None) -> LookbackBuffer | None:
        """The agent's data ``what`` (its episode's list, not copied), or None for a missing output key."""
        episode = self.agent_episodes[agent]
        if what == "extra_model_outputs":
            values = episode._extra.get(key) if key is not None else None
            if values is None:
                return None
            return LookbackBuffer(values, episode._lookback)
        return LookbackBuffer(getattr(episode, f"_{what}"), episode._lookback)

    def _hanging(self, what: str, agent: Any, key: str | None) -> Any:
        if what == "actions":
            return self._hanging_actions_end.get(agent)
        if what == "rewards":
            return self._hanging_rewards_end.get(agent)
        if what == "extra_model_outputs":
            outputs = self._hanging_extra_model_outputs_end.get(agent)
            return None if outputs is None or key is None else outputs.get(key)
        return None

    def _read(
        self,
        what: str,
        indices: Indices,
        agent_ids: Collection[Any] | Any,
        env_steps: bool,
        neg_index_as_lookback: bool,
        fill: Any,
        return_list: bool,
        *,
        key: str | None = None,
    ) -> Any:
        agents = [a for a in self.agent_episodes if a in wanted_agents(agent_ids, self.agent_episodes)]
        if not env_steps:
            if return_list:
                raise ValueError(f"get_{what}() takes env_steps=False or return_list=True, not both.")
            out: dict[Any, Any] = {}
            for agent in agents:
                buffer = self._buffer(agent, what, key)
                if buffer is None:
                    continue
                value = buffer.get(
                    indices,
                    neg_index_as_lookback=neg_index_as_lookback,
                    fill=fill,
                    add_last=self._hanging(what, agent, key),
                )
                if value is not None and not (isinstance(value, list) and value == []):
                    numpy = isinstance(value, list) and what != "infos" and self.agent_episodes[agent].is_numpy
                    out[agent] = as_array(value) if numpy else value
            return out
        if return_list:
            return self._read_as_list(what, indices, agents, neg_index_as_lookback, fill, key)
        out = self._read_by_env_steps(what, indices, agents, neg_index_as_lookback, fill, key)
        if what != "infos":
            # A numpy'ized agent's several values come back as one array (RLlib's to_numpy()).
            out = {
                a: as_array(v) if isinstance(v, list) and self.agent_episodes[a].is_numpy else v for a, v in out.items()
            }
        return out

    def _position(self, agent: Any, agent_t: Any) -> Any:
        """The mapping's value: a position in the agent's data (lookback included), or the skip tag."""
        if agent_t == SKIP:
            return SKIP
        return int(agent_t)

    def _skip_unacted(self, what: str, buffer: LookbackBuffer, hanging: Any, index: Any) -> Any:
        """The mapping's entry of an observation not yet acted on reads as a skip for per-step data (RLlib's)."""
        if what in STEP_DATA and index == len(buffer.data) + (hanging is not None):
            return SKIP
        return index

    def _read_by_env_steps(
        self, what: str, indices: Indices, agents: list[Any], neg_index_as_lookback: bool, fill: Any, key: str | None
    ) -> dict[Any, Any]:
        out: dict[Any, Any] = {}
        for agent in agents:
            buffer = self._buffer(agent, what, key)
            if buffer is None:
                continue
            hanging = self._hanging(what, agent, key)
            agent_ts = self.env_t_to_agent_t[agent].get(
                indices,
                neg_index_as_lookback=neg_index_as_lookback,
                fill=SKIP if fill is not None else None,
                ignore_last=what in STEP_DATA,
            )
            if isinstance(agent_ts, list):
                positions = [self._position(agent, self._skip_unacted(what, buffer, hanging, t)) for t in agent_ts]
                values = self._values_at(buffer, positions, fill, hanging)
                if values:
                    out[agent] = values
            else:
                position = self._position(agent, self._skip_unacted(what, buffer, hanging, agent_ts))
                value = self._value_at(buffer, position, fill, hanging)
                if value is not None:
                    out[agent] = value
        return out

    def _read_as_list(
        self, what: str, indices: Indices, agents: list[Any], neg_index_as_lookback: bool, fill: Any, key: str | None
    ) -> list[dict[Any, Any]]:
        positions: dict[Any, list[Any]] = {}
        for agent in agents:
            agent_ts = self.env_t_to_agent_t[agent].get(
                indices, neg_index_as_lookback=neg_index_as_lookback, fill=SKIP, ignore_last=what in STEP_DATA
            )
            agent_ts = agent_ts if isinstance(agent_ts, list) else [agent_ts]
            positions[agent] = [self._position(agent, t) for t in agent_ts]
        if not positions:
            return []
        out: list[dict[Any, Any]] = []
        for i in range(len(next(iter(positions.values())))):
            row: dict[Any, Any] = {}
            for agent, agent_positions in positions.items():
                buffer = self._buffer(agent, what, key)
                if buffer is None:
                    continue
                hanging = self._hanging(what, agent, key)
                position = self._skip_unacted(what, buffer, hanging, agent_positions[i])
                value = self._value_at(buffer, position, fill, hanging)
                if value is not None:
                    row[agent] = value
            out.append(row)
        return out

    @staticmethod
    def _value_at(buffer: LookbackBuffer, position: Any, fill: Any, hanging: Any) -> Any:
        """The item at ``position`` (lookback included; the hanging item after the data), or ``fill``/None."""
        if position == SKIP:
            return fill
        return buffer.get(position - buffer.lookback, neg_index_as_lookback=True, fill=fill, add_last=hanging)

    @staticmethod
    def _values_at(buffer: LookbackBuffer, positions: list[Any], fill: Any, hanging: Any) -> list[Any]:
        if fill is not None:
            return [EpisodeReads._value_at(buffer, p, fill, hanging) for p in positions]
        kept = [p - buffer.lookback for p in positions if p != SKIP]
        if not kept:
            return []
        values = buffer.get(kept, neg_index_as_lookback=True, add_last=hanging)
        return list(values)

"""RLlib's setters of a ``MultiAgentEpisode`` (``set_observations``, ``set_actions``, ``set_rewards``,
``set_extra_model_outputs``: agent id -> new data, each agent's episode indexed in its own steps)
and ``to_numpy``.

This module imports nothing of ``cairn.rl`` but :mod:`cairn.rl.env.lookback_buffer`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self

from cairn.rl.env.lookback_buffer import Indices

__all__ = ["EpisodeSetters"]


class EpisodeSetters:
    """The setters and ``to_numpy``, mixed into :class:`~cairn.rl.env.multi_agent_episode.MultiAgentEpisode`."""

    id_: str
    agent_episodes: dict[Any, Any]
    _is_numpy: bool

    def _set_agents(self, what: str, new_data: Mapping[Any, Any], **kwargs: Any) -> None:
        for agent in new_data:
            if agent not in self.agent_episodes:
                raise KeyError(
                    f"MultiAgentEpisode {self.id_!r} has no agent {agent!r}; it has "
                    f"{sorted(map(str, self.agent_episodes))}."
                )
        for agent, agent_data in new_data.items():
            getattr(self.agent_episodes[agent], f"set_{what}")(new_data=agent_data, **kwargs)

    def set_observations(
        self, *, new_data: Mapping[Any, Any], at_indices: Indices = None, neg_index_as_lookback: bool = False
    ) -> None:
        """Overwrite agents' observations (agent id -> new data; ``at_indices`` in each agent's own steps).

        Raises:
            KeyError: An agent without an episode here (nothing is changed).
            IndexError: An index outside an agent's data, or a count of new items that differs from the indices'.
        """
        self._set_agents("observations", new_data, at_indices=at_indices, neg_index_as_lookback=neg_index_as_lookback)

    def set_actions(
        self, *, new_data: Mapping[Any, Any], at_indices: Indices = None, neg_index_as_lookback: bool = False
    ) -> None:
        """Overwrite agents' actions (see :meth:`set_observations`)."""
        self._set_agents("actions", new_data, at_indices=at_indices, neg_index_as_lookback=neg_index_as_lookback)

    def set_rewards(
        self, *, new_data: Mapping[Any, Any], at_indices: Indices = None, neg_index_as_lookback: bool = False
    ) -> None:
        """Overwrite agents' rewards (see :meth:`set_observations`); their returns follow."""
        self._set_agents("rewards", new_data, at_indices=at_indices, neg_index_as_lookback=neg_index_as_lookback)

    def set_extra_model_outputs(
        self, *, key: str, new_data: Mapping[Any, Any], at_indices: Indices = None, neg_index_as_lookback: bool = False
    ) -> None:
        """Overwrite agents' extra model output ``key`` (see :meth:`set_observations`)."""
        self._set_agents(
            "extra_model_outputs", new_data, key=key, at_indices=at_indices, neg_index_as_lookback=neg_index_as_lookback
        )

    @property
    def is_numpy(self) -> bool:
        """Whether :meth:`to_numpy` was called (the getters return arrays; no more steps)."""
        return self._is_numpy

    def to_numpy(self) -> Self:
        """Make the getters return numpy arrays and close the episode to new steps (RLlib's ``to_numpy``)."""
        for episode in self.agent_episodes.values():
            episode.to_numpy()
        self._is_numpy = True
        return self

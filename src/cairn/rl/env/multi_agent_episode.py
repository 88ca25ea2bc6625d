"""RLlib's ``MultiAgentEpisode`` (``ray.rllib.env.multi_agent_episode``), as the RLlib-API samplers return it.

One game of a multi-agent env, or the part of it one ``sample()`` call collected: a
:class:`~cairn.rl.env.single_agent_episode.SingleAgentEpisode`-like chunk per agent
(``agent_episodes``) and the env's time steps (``env_t_started``, ``env_t``, ``len``).
"""

from __future__ import annotations

from typing import Any

from cairn.rl.env.episodes import SingleAgentEpisode

__all__ = ["MultiAgentEpisode"]


class MultiAgentEpisode:
    """The agents' episodes of one game (or of its part one ``sample()`` returned).

    Attributes:
        id_: The game's id (a continuation chunk keeps its game's id).
        env_t_started: The env time step the chunk starts at (0 for a game's first chunk).
        agent_episodes: Agent id -> that agent's episode chunk.
        is_terminated: The env ended the game (``terminateds["__all__"]``).
        is_truncated: The game was cut off (``truncateds["__all__"]``).
    """

    def __init__(self, id_: str, *, env_t_started: int = 0) -> None:
        self.id_ = id_
        self.env_t_started = int(env_t_started)
        self.agent_episodes: dict[Any, SingleAgentEpisode] = {}
        self.is_terminated = False
        self.is_truncated = False
        self._env_steps = 0

    @property
    def is_done(self) -> bool:
        """Whether the game ended (terminated or truncated)."""
        return self.is_terminated or self.is_truncated

    @property
    def env_t(self) -> int:
        """The env time step now: ``env_t_started + len(episode)`` (RLlib's ``env_t``)."""
        return self.env_t_started + self._env_steps

    def add_env_step(self) -> None:
        """Count one env step of the game (its agents' episodes record their own steps)."""
        self._env_steps += 1

    def __len__(self) -> int:
        return self._env_steps

    def env_steps(self) -> int:
        """The env steps of this chunk (``len(episode)``)."""
        return self._env_steps

    def agent_steps(self) -> int:
        """The agent steps of this chunk: the sum of its agents' steps (RLlib's ``agent_steps()``)."""
        return sum(len(episode) for episode in self.agent_episodes.values())

    def get_return(self) -> float:
        """The sum of all agents' rewards in this chunk."""
        return sum(episode.get_return() for episode in self.agent_episodes.values())

    def module_for(self, agent_id: Any) -> str | None:
        """The module that acts for ``agent_id`` in this game.

        Raises:
            KeyError: The agent has not acted in this chunk.
        """
        if agent_id not in self.agent_episodes:
            raise KeyError(
                f"MultiAgentEpisode {self.id_!r} has no agent {agent_id!r}; it has {list(self.agent_episodes)}."
            )
        return self.agent_episodes[agent_id].module_id

    def __repr__(self) -> str:
        return (
            f"MultiAgentEpisode({self.id_!r}, env_t_started={self.env_t_started}, len={len(self)}, done={self.is_done})"
        )

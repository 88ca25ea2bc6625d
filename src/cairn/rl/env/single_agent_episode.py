"""RLlib's import path (``ray.rllib.env.single_agent_episode``) of cairn's :class:`SingleAgentEpisode`."""

from __future__ import annotations

from cairn.rl.env.episodes import SingleAgentEpisode

__all__ = ["SingleAgentEpisode"]

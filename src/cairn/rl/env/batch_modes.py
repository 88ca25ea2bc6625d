"""RLlib's ``batch_mode`` for the algorithms' batch samplers (``sample_batches()``).

``"truncate_episodes"`` (the default): each call steps every env copy ``rollout_length``
times and cuts the episodes in flight (their last row bootstraps from the value of the
next observation); the episodes go on in the next call.

``"complete_episodes"`` (RLlib's): each call returns whole episodes only. The runner steps
its copies until the finished episodes hold at least ``rollout_length`` steps per env copy
(agent steps with ``count_steps_by="agent_steps"``; the single-agent runner counts every
slot's steps) and every episode in the batch ended, so a batch may be longer than that,
and its length varies from call to call. The multi-agent runner goes on stepping only the
copies whose game is in flight until each ends (a copy whose game ended waits for the next
call, at the start of its next game). The single-agent runner, whose sub-environments step
together, stops at the step where the count is reached and drops the unfinished episodes of
the other slots (RLlib's runner resets its envs for each such call too): their steps count
as sampled, never as trained, and the next call starts new episodes in every slot.

A batch of whole episodes comes as one time-major column ``[T, 1, ...]`` of episodes one
after the other (each ends with ``terminateds`` or ``truncateds``, ``final_vf`` for a
truncated one), the layout of the multi-agent runner's batches, so that GAE runs per episode.
"""

from __future__ import annotations

from typing import Any

__all__ = ["COMPLETE_EPISODES_MAX_STEPS", "IncompleteEpisodesError", "complete_episodes", "too_long"]

COMPLETE_EPISODES_MAX_STEPS = 100_000
"""The most env steps one env copy takes in one ``sample_batches()`` call with ``"complete_episodes"``
beyond ``rollout_length``: an episode that does not end within it (an env without a time limit) is
refused rather than sampled forever."""


class IncompleteEpisodesError(RuntimeError):
    """An episode went on past :data:`COMPLETE_EPISODES_MAX_STEPS` with ``batch_mode="complete_episodes"``."""


def complete_episodes(config: Any) -> bool:
    """Whether ``config`` asks for whole episodes (``batch_mode="complete_episodes"``)."""
    return bool(config.batch_mode == "complete_episodes")


def too_long(env: Any, steps: int) -> IncompleteEpisodesError:
    """The error for an episode of ``env`` still running after ``steps`` env steps in one call."""
    return IncompleteEpisodesError(
        f"batch_mode='complete_episodes': an episode of env={env!r} went on for {steps} env steps in one "
        f"sample_batches() call (at most rollout_length + {COMPLETE_EPISODES_MAX_STEPS}). Give the env a time "
        "limit (gymnasium's TimeLimit, max_episode_steps) or use batch_mode='truncate_episodes'."
    )

"""The episode hooks of the single-agent batch sampler (:class:`~cairn.rl.env.env_runner.EnvRunner`).

When a callback overrides an episode hook, the runner keeps an episode object per slot
(:class:`~cairn.rl.env.episodes.EpisodeTracker`) and calls, as RLlib's runners do,
``on_episode_created`` and ``on_episode_start`` when an episode begins, ``on_episode_step`` after
each of its steps (its last one too) and ``on_episode_end`` after its last, with
``prev_episode_chunks=[]`` (cairn's episode object is the whole episode).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import gymnasium as gym
import numpy as np
import numpy.typing as npt

from cairn.rl.callbacks.callbacks import CallbackList
from cairn.rl.core.rl_module.multi_rl_module import MultiRLModule
from cairn.rl.env.episodes import EpisodeTracker
from cairn.rl.utils.metrics.metrics_logger import MetricsLogger

__all__ = ["EnvRunnerEpisodeHooks"]


class EnvRunnerEpisodeHooks:
    """The episode objects and hook calls of :class:`~cairn.rl.env.env_runner.EnvRunner` (a base of it)."""

    # What the runner's __init__ sets (see EnvRunner).
    worker_index: int
    num_slots: int
    slot_agents: list[str]
    slot_modules: list[str]
    env: gym.vector.SyncVectorEnv
    module: MultiRLModule
    metrics: MetricsLogger
    callbacks: CallbackList
    episode_tracker: EpisodeTracker | None
    _obs: Any
    _episode_returns: npt.NDArray[np.float64]
    _episode_lengths: npt.NDArray[np.int64]
    _episode_hooks: bool
    _step_hook: bool
    _record_episode: Callable[[float, int, str], None]

    def _end_episode(self, slot: int, *, start_next: bool = True) -> None:
        self._episode_hook("on_episode_end", slot, done=True)
        self._record_episode(
            float(self._episode_returns[slot]), int(self._episode_lengths[slot]), self.slot_modules[slot]
        )
        self._episode_returns[slot] = 0.0
        self._episode_lengths[slot] = 0
        if self.episode_tracker is not None:
            self.episode_tracker.begin_next(slot)
        if start_next:  # same-step autoreset: the next one began (else: it starts in the next call)
            self._episode_hook("on_episode_start", slot, done=False)

    def _episode_steps(
        self,
        next_obs: npt.NDArray[Any],
        actions: npt.NDArray[Any],
        rewards: npt.NDArray[Any],
        terminateds: npt.NDArray[np.bool_],
        truncateds: npt.NDArray[np.bool_],
        infos: Mapping[str, Any],
    ) -> None:
        """Record a step in the episode objects, then call ``on_episode_step`` for each (an episode's last
        step too, before its ``on_episode_end``, as RLlib's runners do)."""
        if self.episode_tracker is not None:
            self.episode_tracker.step(next_obs, actions, rewards, terminateds, truncateds, infos)
        if self._step_hook:
            for i in range(self.num_slots):
                self._episode_hook("on_episode_step", i, done=False)

    def _new_episode_tracker(self, reset_infos: Mapping[str, Any]) -> EpisodeTracker | None:
        """Episode objects for the slots' current episodes, when a callback overrides an episode hook."""
        if not self._episode_hooks:
            return None
        return EpisodeTracker(self.worker_index, self.slot_agents, self.slot_modules, self._obs, reset_infos)

    def _episode_hook(self, hook: str, slot: int, *, done: bool) -> None:
        """Call the callbacks' ``hook`` (``on_episode_start``/``_step``/``_end``) for the episode of ``slot``
        (``done``: it ended, which the episode itself says)."""
        if self.episode_tracker is None:  # no callback overrides an episode hook
            return
        if hook == "on_episode_start":  # cairn's episode object comes with its first observation: created now
            self._episode_hook("on_episode_created", slot, done=False)
        # RLlib's on_episode_end also gets the chunks earlier sample() calls returned: none, the object is whole.
        extra: dict[str, Any] = {"prev_episode_chunks": []} if hook == "on_episode_end" else {}
        getattr(self.callbacks, hook)(
            episode=self.episode_tracker.episodes[slot],
            env_runner=self,
            metrics_logger=self.metrics,
            env=self.env.envs[slot],
            env_index=slot,
            rl_module=self.module,
            **extra,
        )

"""RLlib's ``CartPoleCrashing`` (``ray.rllib.examples.envs.classes.cartpole_crashing``): a CartPole that fails.

For trying out how env runners cope with failing environments: ``step()`` (and ``reset()``)
raise :class:`~cairn.rl.utils.error.EnvError` now and then, and may stall for a while.
``env_config`` keys, as RLlib's:

- ``p_crash`` (default 0.005) / ``p_crash_reset`` (0.0): the chance of a crash in each
  ``step()`` / ``reset()``;
- ``crash_after_n_steps``: crash at exactly this step of each episode (an int, or a
  ``(low, high)`` pair to draw it from);
- ``crash_on_worker_indices``: crash only on these env runners (read from an
  :class:`~cairn.rl.env.env_context.EnvContext`; a plain dict counts as worker 0);
- ``p_stall`` / ``p_stall_reset`` / ``stall_after_n_steps`` / ``stall_time_sec`` /
  ``stall_on_worker_indices``: the same for stalls (sleeping ``stall_time_sec`` seconds,
  or a time drawn from a ``(low, high)`` pair).

Differs from RLlib's: its draws come from a generator seeded with ``reset(seed=)`` (RLlib:
an unseeded one), so a seeded run crashes at the same steps again; a bad setting raises
``ValueError`` (RLlib: an assert); ``init_time_s`` (a sleep in the constructor) is not
taken; there is no ``MultiAgentCartPoleCrashing`` (use ``"multi:"`` with a registered name).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import numpy as np
from gymnasium.envs.classic_control import CartPoleEnv

from cairn.rl.utils.error import EnvError

__all__ = ["CartPoleCrashing"]

MAX_STALL_S = 3600.0
"""The longest stall a config may ask for (a bound on what ``stall_time_sec`` makes it sleep)."""


def _pair_or_number(name: str, value: Any, *, integer: bool) -> Any:
    """``value`` (None, a number >= 0, or a ``(low, high)`` pair of them) as the env keeps it."""

    def number(v: Any) -> bool:
        kinds = (int,) if integer else (int, float)
        return isinstance(v, kinds) and not isinstance(v, bool) and v >= 0

    if value is None or number(value):
        return value
    if isinstance(value, tuple | list) and len(value) == 2 and all(number(v) for v in value):
        return tuple(value)
    raise ValueError(f"CartPoleCrashing: {name}={value!r:.40} must be a number >= 0 or a (low, high) pair.")


class CartPoleCrashing(CartPoleEnv):
    """A CartPole env that crashes (or stalls) from time to time (see the module docstring).

    Args:
        config: The env config (a dict or an ``EnvContext``).
    """

    def __init__(self, config: Mapping[str, Any] | None = None) -> None:
        super().__init__()
        self.config = config if config is not None else {}
        worker_index = int(getattr(self.config, "worker_index", 0))
        self.p_crash = float(self.config.get("p_crash", 0.005))
        self.p_crash_reset = float(self.config.get("p_crash_reset", 0.0))
        self.crash_after_n_steps = _pair_or_number(
            "crash_after_n_steps", self.config.get("crash_after_n_steps"), integer=True
        )
        faulty = self.config.get("crash_on_worker_indices")
        if faulty and worker_index not in faulty:
            self.p_crash, self.p_crash_reset, self.crash_after_n_steps = 0.0, 0.0, None
        self.p_stall = float(self.config.get("p_stall", 0.0))
        self.p_stall_reset = float(self.config.get("p_stall_reset", 0.0))
        self.stall_after_n_steps = _pair_or_number(
            "stall_after_n_steps", self.config.get("stall_after_n_steps"), integer=True
        )
        self.stall_time_sec = _pair_or_number("stall_time_sec", self.config.get("stall_time_sec"), integer=False)
        stall_bound = max(self.stall_time_sec) if isinstance(self.stall_time_sec, tuple) else self.stall_time_sec
        if stall_bound is not None and stall_bound > MAX_STALL_S:
            raise ValueError(f"CartPoleCrashing: stall_time_sec={self.stall_time_sec!r} is above {MAX_STALL_S} s.")
        faulty = self.config.get("stall_on_worker_indices")
        if faulty and worker_index not in faulty:
            self.p_stall, self.p_stall_reset, self.stall_after_n_steps = 0.0, 0.0, None
        for name in ("p_crash", "p_crash_reset", "p_stall", "p_stall_reset"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"CartPoleCrashing: {name}={getattr(self, name)!r} must be a probability in [0, 1].")
        self.timesteps = 0
        self._crash_at: int | None = None
        self._stall_at: int | None = None
        self._rng = np.random.default_rng()

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        """Start an episode, unless this reset crashes (or stalls first)."""
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        self.timesteps = 0
        self._crash_at = self._stall_at = None
        if self._should_crash(self.p_crash_reset):
            raise EnvError(f"Simulated env crash on worker={getattr(self.config, 'worker_index', 0)} during reset().")
        self._stall_if_necessary(self.p_stall_reset)
        obs, info = super().reset(seed=seed, options=options)
        return obs, dict(info)

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        """One CartPole step, unless this step crashes (or stalls first)."""
        self.timesteps += 1
        if self._should_crash(self.p_crash):
            raise EnvError(f"Simulated env crash on worker={getattr(self.config, 'worker_index', 0)} during step().")
        self._stall_if_necessary(self.p_stall)
        obs, reward, terminated, truncated, info = super().step(action)  # type: ignore[no-untyped-call]
        return obs, float(reward), bool(terminated), bool(truncated), dict(info)

    def _draw_step(self, setting: Any) -> int:
        return int(self._rng.integers(setting[0], setting[1])) if isinstance(setting, tuple) else int(setting)

    def _should_crash(self, p: float) -> bool:
        if self._rng.random() < p:
            return True
        if self.crash_after_n_steps is not None:
            if self._crash_at is None:
                self._crash_at = self._draw_step(self.crash_after_n_steps)
            return self._crash_at == self.timesteps
        return False

    def _stall_if_necessary(self, p: float) -> None:
        stall = bool(self._rng.random() < p)
        if not stall and self.stall_after_n_steps is not None:
            if self._stall_at is None:
                self._stall_at = self._draw_step(self.stall_after_n_steps)
            stall = self._stall_at == self.timesteps
        if stall and self.stall_time_sec is not None:
            low_high = self.stall_time_sec
            time.sleep(float(self._rng.uniform(*low_high)) if isinstance(low_high, tuple) else float(low_high))

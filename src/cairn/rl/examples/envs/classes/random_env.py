"""RLlib's ``RandomEnv`` (``ray.rllib.examples.envs.classes.random_env``): samples its observations and rewards.

``env_config`` keys, as RLlib's: ``observation_space`` and ``action_space`` (gymnasium
spaces, default ``Discrete(2)``), ``reward_space`` (default ``Box(-1, 1, ())``),
``static_samples`` (one observation and reward drawn once, repeated), ``p_terminated``
(or its older name ``p_done``; default 0.1: the chance an episode ends after each step),
``max_episode_len`` (truncates), ``check_action_bounds`` (refuse actions outside the
space).

Differs from RLlib's: every draw comes from the env's own seeded ``np_random`` (RLlib:
the spaces' and numpy's global RNG), so an episode is the same for the same seed and,
with the step counter registered with cairn, resumes exactly from a checkpoint.
"""

from __future__ import annotations

import copy
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.spaces import Discrete, Tuple

from cairn.rl.env.env_state import register_env_state_handler
from cairn.state_checks import count

__all__ = ["RandomEnv"]


class RandomEnv(gym.Env[Any, Any]):
    """A randomly acting environment of any spaces (see the module docstring for its ``config``)."""

    def __init__(self, config: dict[str, Any] | None = None) -> None:
        config = dict(config or {})
        self.action_space = config.get("action_space", Discrete(2))
        self.observation_space = config.get("observation_space", Discrete(2))
        self.reward_space = config.get("reward_space", gym.spaces.Box(low=-1.0, high=1.0, shape=(), dtype=np.float32))
        for name in ("action_space", "observation_space", "reward_space"):
            if not isinstance(getattr(self, name), gym.Space):
                raise TypeError(f"RandomEnv's {name} must be a gymnasium space, got {getattr(self, name)!r:.60}.")
        p_terminated = config.get("p_terminated")
        self.p_terminated = float(config.get("p_done", 0.1) if p_terminated is None else p_terminated)
        if not 0.0 <= self.p_terminated <= 1.0:
            raise ValueError(f"RandomEnv's p_terminated must be in [0, 1], got {self.p_terminated}.")
        self.max_episode_len: int | None = config.get("max_episode_len")
        self.check_action_bounds = bool(config.get("check_action_bounds", False))
        self.static_samples = bool(config.get("static_samples", False))
        if self.static_samples:
            self.observation_sample = self._draw(self.observation_space)
            self.reward_sample = self._draw(self.reward_space)
        self.steps = 0

    def _draw(self, space: gym.Space[Any]) -> Any:
        # The space draws with a seed taken from the env's np_random: the env's seed decides every sample.
        space.seed(int(self.np_random.integers(2**31)))
        return space.sample()

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        """A new episode: a sampled (or the static) observation."""
        super().reset(seed=seed)
        self.steps = 0
        if self.static_samples:
            return copy.deepcopy(self.observation_sample), {}
        return self._draw(self.observation_space), {}

    def step(self, action: Any) -> tuple[Any, Any, bool, bool, dict[str, Any]]:
        """A sampled observation and reward; the episode ends with probability ``p_terminated``."""
        if self.check_action_bounds and not self.action_space.contains(action):
            raise ValueError(f"Illegal action for {self.action_space}: {action!r:.80}")
        if isinstance(self.action_space, Tuple) and len(action) != len(self.action_space.spaces):
            raise ValueError(f"Illegal action for {self.action_space}: {action!r:.80}")
        self.steps += 1
        terminated = truncated = False
        if self.max_episode_len and self.steps >= self.max_episode_len:
            truncated = True
        elif self.p_terminated > 0.0:
            terminated = bool(self.np_random.random() < self.p_terminated)
        if self.static_samples:
            return copy.deepcopy(self.observation_sample), copy.deepcopy(self.reward_sample), terminated, truncated, {}
        return self._draw(self.observation_space), self._draw(self.reward_space), terminated, truncated, {}


def _get_state(env: RandomEnv) -> dict[str, Any]:
    return {"steps": int(env.steps)}


def _set_state(env: RandomEnv, state: Any) -> None:
    steps = state.get("steps") if isinstance(state, dict) else None
    if not isinstance(state, dict) or set(state) != {"steps"} or not count.fits(steps):
        raise ValueError(
            "the saved state of RandomEnv is not {'steps': a non-negative int}; the checkpoint was written by other "
            "code or tampered with."
        )
    env.steps = int(state["steps"])


register_env_state_handler(RandomEnv, _get_state, _set_state)

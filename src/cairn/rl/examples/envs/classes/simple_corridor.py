"""RLlib's ``SimpleCorridor`` (``ray.rllib.examples.envs.classes.simple_corridor``): walk to the corridor's end.

The agent starts at position 0 and moves left (action 0) or right (action 1); the episode
ends at ``corridor_length`` (``env_config``, default 10, at most 999) with reward 1, every
other step costs 0.01. The observation is the position (``Box(0, 999, (1,))``).

Differs from RLlib's: its state (position and length) is registered with cairn
(:func:`~cairn.rl.env.env_state.register_env_state_handler`), so its episodes in flight
survive a checkpoint; a length above 999 raises ``ValueError`` (RLlib: an assert).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.spaces import Box, Discrete

from cairn.rl.env.env_state import register_env_state_handler

__all__ = ["SimpleCorridor"]

MAX_CORRIDOR_LENGTH = 999
"""The longest corridor (the observation space's bound)."""


class SimpleCorridor(gym.Env[np.ndarray, Any]):
    """Walk right to the end of a corridor.

    Args:
        config: ``corridor_length`` (an int in [1, 999], default 10).
    """

    def __init__(self, config: dict[str, Any] | None = None) -> None:
        self.action_space = Discrete(2)
        self.observation_space = Box(0.0, float(MAX_CORRIDOR_LENGTH), shape=(1,), dtype=np.float32)
        self.set_corridor_length((config or {}).get("corridor_length", 10))
        self._cur_pos = 0.0

    def set_corridor_length(self, length: int) -> None:
        """Set the corridor's length (RLlib's method; the next episodes use it)."""
        if type(length) is not int or not 1 <= length <= MAX_CORRIDOR_LENGTH:
            raise ValueError(f"corridor_length must be an int in [1, {MAX_CORRIDOR_LENGTH}], got {length!r:.40}.")
        self.end_pos = length

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Back to the corridor's start."""
        super().reset(seed=seed)
        self._cur_pos = 0.0
        return self._get_obs(), {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        """Move left (0, not past the start) or right (1)."""
        if action not in (0, 1):
            raise ValueError(f"SimpleCorridor's actions are 0 (left) and 1 (right), got {action!r:.40}.")
        if action == 0 and self._cur_pos > 0:
            self._cur_pos -= 1.0
        elif action == 1:
            self._cur_pos += 1.0
        terminated = self._cur_pos >= self.end_pos
        return self._get_obs(), 1.0 if terminated else -0.01, terminated, False, {}

    def _get_obs(self) -> np.ndarray:
        return np.array([self._cur_pos], np.float32)


def _get_state(env: SimpleCorridor) -> dict[str, Any]:
    return {"position": float(env._cur_pos), "length": int(env.end_pos)}


def _set_state(env: SimpleCorridor, state: Any) -> None:
    position = state.get("position") if isinstance(state, dict) else None
    length = state.get("length") if isinstance(state, dict) else None
    if (
        not isinstance(state, dict)
        or set(state) != {"position", "length"}
        or type(length) is not int
        or not 1 <= length <= MAX_CORRIDOR_LENGTH
        or not isinstance(position, float)
        or not 0 <= position <= length
    ):
        raise ValueError(
            "the saved state of SimpleCorridor is not {'position': a float in [0, length], 'length': an int in "
            f"[1, {MAX_CORRIDOR_LENGTH}]}}; the checkpoint was written by other code or tampered with."
        )
    env.end_pos, env._cur_pos = length, position


register_env_state_handler(SimpleCorridor, _get_state, _set_state)

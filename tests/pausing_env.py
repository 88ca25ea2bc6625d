"""A tiny single-agent environment that pauses on demand, for ``cairn train``'s Ctrl-C tests.

``cairn --import pausing_env train --env pausing_env:PausingEnv --set env_config='{"pause_dir": D}'``
trains on it. While the file ``D/pause`` exists, ``step`` marks ``D/paused`` and blocks (for at
most :data:`MAX_PAUSE_S`, so that a broken test cannot hang the suite): a test pauses training in
the middle of an iteration, signals the process, and lets the iteration finish when it chooses,
with no timing involved.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

import cairn
from cairn.rl import register_env_state_handler

MAX_PAUSE_S = 120.0
"""The longest a step blocks (far beyond what any test waits for)."""


@cairn.register  # configs name it by path (--env pausing_env:PausingEnv): this library allows it (SPEC 8)
class PausingEnv(gym.Env[np.ndarray, int]):
    """A counter walked for 8 steps (reward 1 for action 1); ``step`` blocks while ``pause_dir/pause`` exists."""

    def __init__(self, env_config: Mapping[str, Any] | None = None) -> None:
        super().__init__()
        self.folder = Path(str(dict(env_config or {})["pause_dir"]))
        self.observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.t = 0

    def _obs(self) -> np.ndarray:
        return np.array([self.t / 8.0, self.np_random.uniform(-1, 1)], dtype=np.float32)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict]:
        pause = self.folder / "pause"
        if pause.exists():
            (self.folder / "paused").touch()
            end = time.monotonic() + MAX_PAUSE_S
            while pause.exists() and time.monotonic() < end:
                time.sleep(0.01)
        self.t += 1
        return self._obs(), float(action), self.t >= 8, False, {}


register_env_state_handler(PausingEnv, lambda env: {"t": env.t}, lambda env, state: setattr(env, "t", int(state["t"])))

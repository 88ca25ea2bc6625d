"""A tiny multi-agent environment whose state calls hang on demand, in Ray workers only.

The Ray tests' workers import this module too (the ``ray_cluster`` fixture puts
``tests/`` on their ``PYTHONPATH``; a config names the env
``"hanging_env:HangingEnv"``). While the file ``env_config["hang_flag"]`` exists,
building the environment, and saving or restoring its state, block in every process but the one
whose pid the file holds (the test's driver, whose local runner must not hang),
for at most :data:`MAX_HANG_S` so that a broken test cannot hang the suite.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

import cairn
from cairn.rl import MultiAgentEnv, register_env_state_handler

MAX_HANG_S = 120.0
"""The longest a state call blocks (far beyond any timeout the tests set)."""


@cairn.register  # configs name it by path ("hanging_env:HangingEnv"): this library allows it
class HangingEnv(MultiAgentEnv):
    """One agent that walks a counter for 8 steps (reward 1 for action 1); its state is the counter."""

    def __init__(self, env_config: Mapping[str, Any] | None = None) -> None:
        super().__init__()
        self.hang_flag = str(dict(env_config or {}).get("hang_flag", ""))
        self.possible_agents = ["agent_0"]
        self.agents = list(self.possible_agents)
        self.observation_spaces = {"agent_0": gym.spaces.Box(-1.0, 1.0, (2,), np.float32)}
        self.action_spaces = {"agent_0": gym.spaces.Discrete(2)}
        self.t = 0
        self.hang_if_asked()  # a runner started while the flag exists hangs in its constructor

    def _obs(self) -> dict[str, Any]:
        return {"agent_0": np.array([self.t / 8.0, self.np_random.uniform(-1, 1)], dtype=np.float32)}

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        gym.Env.reset(self, seed=seed)
        self.agents = list(self.possible_agents)
        self.t = 0
        return self._obs(), {}

    def step(
        self, action_dict: dict[str, Any]
    ) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any], dict[str, Any], dict[str, Any]]:
        self.t += 1
        done = self.t >= 8
        return (
            self._obs(),
            {"agent_0": float(action_dict["agent_0"])},
            {"agent_0": done, "__all__": done},
            {"agent_0": False, "__all__": False},
            {},
        )

    def hang_if_asked(self) -> None:
        """Block while the flag file exists, unless this is the process it names."""
        flag = Path(self.hang_flag) if self.hang_flag else None
        end = time.monotonic() + MAX_HANG_S
        while flag is not None and time.monotonic() < end:
            try:
                driver_pid = int(flag.read_text() or "0")
            except (FileNotFoundError, ValueError):
                return
            if driver_pid == os.getpid():
                return
            time.sleep(0.05)


def _get(env: HangingEnv) -> dict[str, Any]:
    env.hang_if_asked()
    return {"t": env.t}


def _set(env: HangingEnv, state: Any) -> None:
    env.hang_if_asked()
    env.t = int(state["t"])


register_env_state_handler(HangingEnv, _get, _set)


def hang_in_workers(flag: Path) -> None:
    """Make the workers' state calls hang (this process, the driver, goes on)."""
    flag.write_text(str(os.getpid()))

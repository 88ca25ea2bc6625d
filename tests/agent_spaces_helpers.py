"""A multi-agent env whose agents have the spaces its env_config gives (tests of issue 27).

At the top of ``tests/`` so that remote env runners (Ray workers, which get ``tests/`` on
their path) import it by the name the config records.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from cairn.rl.env.env_state import register_env_state_handler
from cairn.rl.env.multi_agent_env import ALL_AGENTS, MultiAgentEnv


class SpacesEnv(MultiAgentEnv):
    """Every agent acts every step; agent ``i`` sees ``dims[i]`` numbers and has ``actions[i]`` actions.

    The reward is 1 when the action equals the sign pattern of the first observation entry, so
    modules have something to learn; episodes are ``length`` steps (truncated).
    """

    def __init__(self, config: dict[str, Any] | None = None) -> None:
        super().__init__()
        config = config or {}
        self.possible_agents = list(config.get("ids", ["a0", "a1"]))
        dims = list(config.get("dims", [3, 5]))
        actions = list(config.get("actions", [2, 3]))
        self.length = int(config.get("length", 6))
        self.observation_spaces = {
            a: gym.spaces.Box(-5.0, 5.0, (d,), np.float32) for a, d in zip(self.possible_agents, dims, strict=True)
        }
        self.action_spaces = {a: gym.spaces.Discrete(n) for a, n in zip(self.possible_agents, actions, strict=True)}
        self.agents = list(self.possible_agents)
        self.t = 0

    def _obs(self) -> dict[Any, Any]:
        return {
            a: self.np_random.normal(size=self.observation_spaces[a].shape).astype(np.float32)
            for a in self.possible_agents
        }

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[dict[Any, Any], Any]:
        gym.Env.reset(self, seed=seed)
        self.t = 0
        return self._obs(), {}

    def step(self, action_dict: dict[Any, Any]) -> tuple[dict[Any, Any], ...]:  # type: ignore[override]
        self.t += 1
        rewards = {a: float(int(act) == 0) for a, act in action_dict.items()}
        done = self.t >= self.length
        return (
            self._obs(),
            rewards,
            {ALL_AGENTS: False},
            {**dict.fromkeys(action_dict, done), ALL_AGENTS: done},
            {},
        )


register_env_state_handler(SpacesEnv, lambda env: {"t": env.t}, lambda env, state: setattr(env, "t", int(state["t"])))

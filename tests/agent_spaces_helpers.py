"""A multi-agent env whose agents have the spaces its env_config gives (tests of issue 27).

At the top of ``tests/`` so that remote env runners (Ray workers, which get ``tests/`` on
their path) import it by the name the config records.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

import cairn
from cairn.rl.connectors.env_to_module import FlattenObservations, FrameStackingEnvToModule
from cairn.rl.env.env_state import register_env_state_handler
from cairn.rl.env.multi_agent_env import ALL_AGENTS, MultiAgentEnv


@cairn.register  # configs name it by path: this library allows it (SPEC 8)
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


@cairn.register  # configs name it by path (SPEC 8)
class DictAndBoxEnv(MultiAgentEnv):
    """Agent ``"d"`` sees a Dict (``pos``: Box(2,), ``mode``: Discrete(3)), agent ``"b"`` a Box(3,); both act each step.

    Episodes are ``length`` steps (truncated); ``"d"`` is rewarded for picking the action that matches
    ``mode`` parity, ``"b"`` for the sign of its first entry, so both modules have something to learn.
    """

    def __init__(self, config: dict[str, Any] | None = None) -> None:
        super().__init__()
        config = config or {}
        self.length = int(config.get("length", 5))
        self.possible_agents = ["d", "b"]
        self.observation_spaces = {
            "d": gym.spaces.Dict({"pos": gym.spaces.Box(-2.0, 2.0, (2,), np.float32), "mode": gym.spaces.Discrete(3)}),
            "b": gym.spaces.Box(-5.0, 5.0, (3,), np.float32),
        }
        self.action_spaces = {"d": gym.spaces.Discrete(2), "b": gym.spaces.Discrete(2)}
        self.agents = list(self.possible_agents)
        self.t = 0
        self.last: dict[str, Any] = {}

    def _obs(self) -> dict[str, Any]:
        rng = self.np_random
        self.last = {
            "d": {"mode": int(rng.integers(3)), "pos": rng.uniform(-2, 2, size=2).astype(np.float32)},
            "b": rng.normal(size=3).astype(np.float32),
        }
        return {"d": dict(self.last["d"]), "b": self.last["b"].copy()}

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[dict[Any, Any], Any]:
        gym.Env.reset(self, seed=seed)
        self.t = 0
        return self._obs(), {}

    def step(self, action_dict: dict[Any, Any]) -> tuple[dict[Any, Any], ...]:  # type: ignore[override]
        self.t += 1
        rewards = {
            "d": float(int(action_dict["d"]) == self.last["d"]["mode"] % 2),
            "b": float(int(action_dict["b"]) == int(self.last["b"][0] > 0)),
        }
        done = self.t >= self.length
        return self._obs(), rewards, {ALL_AGENTS: False}, {"d": done, "b": done, ALL_AGENTS: done}, {}


def _dict_and_box_state(env: DictAndBoxEnv) -> dict[str, Any]:
    return {
        "t": env.t,
        "last_d_mode": env.last["d"]["mode"],
        "last_d_pos": env.last["d"]["pos"],
        "last_b": env.last["b"],
    }


def _set_dict_and_box_state(env: DictAndBoxEnv, state: dict[str, Any]) -> None:
    env.t = int(state["t"])
    pos = np.array(state["last_d_pos"], np.float32)
    env.last = {"d": {"mode": int(state["last_d_mode"]), "pos": pos}, "b": np.array(state["last_b"], np.float32)}


register_env_state_handler(DictAndBoxEnv, _dict_and_box_state, _set_dict_and_box_state)


def flatten_d_and_stack(env: Any) -> list[Any]:
    """RLlib's multi-agent pieces: flatten only agent ``"d"``'s observations, then stack 3 frames of every agent."""
    return [
        FlattenObservations(multi_agent=True, agent_ids=["d"]),
        FrameStackingEnvToModule(num_frames=3, multi_agent=True),
    ]

"""Environments with Dict and Tuple observations, connector factories and a user ConnectorV2, for the connector tests.

Importing this module registers the environments with gymnasium (and their
state with cairn, so that episodes in flight survive a checkpoint).
"""

from __future__ import annotations

import functools
from typing import Any

import gymnasium as gym
import numpy as np

import cairn
from cairn.rl.connectors.connector_v2 import ConnectorV2
from cairn.rl.connectors.env_to_module import FlattenObservations, FrameStackingEnvToModule
from cairn.rl.env.env_state import register_env_state_handler
from cairn.rl.utils._util import Names


class DictObsEnv(gym.Env[dict[str, Any], int]):
    """A point pushed left or right; observes ``{"phase": Discrete(3), "pos": Box(2)}``."""

    observation_space = gym.spaces.Dict(
        {"pos": gym.spaces.Box(-5.0, 5.0, (2,), np.float32), "phase": gym.spaces.Discrete(3)}
    )
    action_space = gym.spaces.Discrete(2)

    def __init__(self) -> None:
        self.pos = np.zeros(2, dtype=np.float32)
        self.t = 0

    def _obs(self) -> dict[str, Any]:
        return {"pos": self.pos.copy(), "phase": self.t % 3}

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[dict[str, Any], dict]:
        super().reset(seed=seed)
        self.pos = self.np_random.uniform(-0.5, 0.5, size=2).astype(np.float32)
        self.t = 0
        return self._obs(), {}

    def step(self, action: int) -> tuple[dict[str, Any], float, bool, bool, dict]:
        self.t += 1
        push = np.float32(0.3 if action == 1 else -0.3)
        self.pos = (self.pos + push + self.np_random.normal(0, 0.1, size=2)).astype(np.float32)
        terminated = bool(np.abs(self.pos).max() > 1.5)
        return self._obs(), float(-np.abs(self.pos).sum()), terminated, False, {}


class TupleObsEnv(gym.Env[tuple[Any, ...], int]):
    """Observes ``(Discrete(4) counter, Box(1) noise)``; ends after 5 steps."""

    observation_space = gym.spaces.Tuple((gym.spaces.Discrete(4), gym.spaces.Box(-1.0, 1.0, (1,), np.float32)))
    action_space = gym.spaces.Discrete(2)

    def __init__(self) -> None:
        self.t = 0

    def _obs(self) -> tuple[Any, ...]:
        return (self.t % 4, self.np_random.uniform(-1, 1, size=1).astype(np.float32))

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[tuple, dict]:
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), {}

    def step(self, action: int) -> tuple[tuple, float, bool, bool, dict]:
        self.t += 1
        return self._obs(), float(action), self.t >= 5, False, {}


register_env_state_handler(
    DictObsEnv,
    lambda env: {"pos": env.pos.copy(), "t": env.t},
    lambda env, s: (setattr(env, "pos", np.array(s["pos"], dtype=np.float32)), setattr(env, "t", int(s["t"]))),
)
if "CairnDictObs-v0" not in gym.registry:
    gym.register("CairnDictObs-v0", entry_point=DictObsEnv, max_episode_steps=12)
if "CairnTupleObs-v0" not in gym.registry:
    gym.register("CairnTupleObs-v0", entry_point=TupleObsEnv)


@cairn.register  # configs record it; a new process that imports this module loads them
def flatten_and_stack(env: Any) -> list[ConnectorV2]:
    """RLlib's ``lambda env: [FlattenObservations(), FrameStackingEnvToModule(num_frames=3)]``, at module level."""
    return [FlattenObservations(), FrameStackingEnvToModule(num_frames=3)]


@cairn.register  # configs record it; a new process that imports this module loads them
def with_spaces(env: Any, spaces: dict[str, Any], device: str) -> ConnectorV2:
    """A factory that takes RLlib's three arguments; records what it was given."""
    with_spaces.seen = (env, spaces, device)  # type: ignore[attr-defined]
    return FlattenObservations()


class AddEpisodeStep(ConnectorV2):
    """A user piece with state: appends each row's step in its episode (times ``scale``) to the observation."""

    def __init__(self, input_observation_space: Any = None, input_action_space: Any = None, *, scale: float = 1.0):
        self.scale = float(scale)
        self.steps = np.zeros(0, dtype=np.int64)
        super().__init__(input_observation_space, input_action_space)

    def recompute_output_observation_space(self, input_observation_space: Any, input_action_space: Any) -> Any:
        low = np.append(input_observation_space.low, 0.0).astype(np.float32)
        high = np.append(input_observation_space.high, np.inf).astype(np.float32)
        return gym.spaces.Box(low, high, dtype=np.float32)

    def __call__(self, *, rl_module: Any, batch: dict[str, Any], episodes: Any, **kwargs: Any) -> Any:
        slots = np.asarray(kwargs["slots"])
        if self.steps.shape[0] <= slots.max():
            self.steps = np.concatenate([self.steps, np.zeros(slots.max() + 1 - self.steps.shape[0], np.int64)])
        steps = self.steps[slots].copy()
        starts = kwargs.get("episode_starts")
        if starts is not None:
            steps[np.asarray(starts)] = 0
        if kwargs.get("update", True):
            self.steps[slots] = steps + 1
        column = np.asarray(steps * self.scale, dtype=np.float32)[:, None]
        batch["obs"] = np.concatenate([np.asarray(batch["obs"], dtype=np.float32), column], axis=1)
        return batch

    def get_state(self, components: Names = None, *, not_components: Names = None, **kwargs: Any) -> dict[str, Any]:
        return {"steps": self.steps.copy()}

    def set_state(self, state: dict[str, Any]) -> None:
        if "steps" in state:
            self.steps = np.asarray(state["steps"], dtype=np.int64).copy()

    def get_ctor_args_and_kwargs(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        _, kwargs = super().get_ctor_args_and_kwargs()
        return (), {**kwargs, "scale": self.scale}


ADD_STEP = functools.partial(AddEpisodeStep, scale=0.5)


class ScaleActions(ConnectorV2):
    """A module-to-env piece: multiplies the actions by ``factor`` (stateless); counts the rows it
    scaled in the runner's metrics (``scaled_actions``), as RLlib's pieces log theirs."""

    def __init__(self, input_observation_space: Any = None, input_action_space: Any = None, *, factor: float = 1.0):
        self.factor = float(factor)
        super().__init__(input_observation_space, input_action_space)

    def __call__(
        self, *, rl_module: Any, batch: dict[str, Any], episodes: Any, metrics: Any = None, **kwargs: Any
    ) -> Any:
        actions = np.asarray(batch["actions"])
        batch["actions"] = (actions * self.factor).astype(actions.dtype)  # Discrete actions stay ints
        if metrics is not None:
            metrics.log_value("scaled_actions", len(batch["actions"]), reduce="sum")
        return batch

    def get_ctor_args_and_kwargs(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        _, kwargs = super().get_ctor_args_and_kwargs()
        return (), {**kwargs, "factor": self.factor}


class WrongSpace(ConnectorV2):
    """A piece whose __call__ does not match the space it announces (it says nothing changes)."""

    def __call__(self, *, rl_module: Any, batch: dict[str, Any], episodes: Any, **kwargs: Any) -> Any:
        batch["obs"] = np.concatenate([batch["obs"], batch["obs"]], axis=1)
        return batch

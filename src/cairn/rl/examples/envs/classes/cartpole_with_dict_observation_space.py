"""RLlib's ``CartPoleWithDictObservationSpace``: CartPole whose observation is a nested Dict/Tuple.

``ray.rllib.examples.envs.classes.cartpole_with_dict_observation_space``. The observation::

    {
        "x-pos": Box((1,)),
        "angular-pos": {"value": Box(()), "some_random_stuff": Discrete(3)},
        "velocs": (Box((1,)), Box(())),
    }

Differs from RLlib's: ``some_random_stuff`` is drawn from the env's seeded ``np_random``
(RLlib's from the global ``np.random``), so that runs are reproducible, and the env's state
is registered with cairn (:func:`~cairn.rl.env.env_state.register_env_state_handler`), so
that its episodes in flight survive a checkpoint. Register it with gymnasium to train on
it (``gymnasium.register("CartPoleWithDictObs-v1", entry_point=CartPoleWithDictObservationSpace,
max_episode_steps=500)``).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.envs.classic_control import CartPoleEnv

from cairn.rl.env.env_state import register_env_state_handler

__all__ = ["CartPoleWithDictObservationSpace"]


class CartPoleWithDictObservationSpace(CartPoleEnv):
    """CartPole with a nested Dict/Tuple observation space (see the module docstring).

    Args:
        config: Ignored (RLlib's env config argument).
    """

    def __init__(self, config: dict[str, Any] | None = None) -> None:
        super().__init__()
        box = self.observation_space
        assert isinstance(box, gym.spaces.Box)
        low, high = box.low, box.high
        self.observation_space = gym.spaces.Dict(  # type: ignore[assignment]
            {
                "x-pos": gym.spaces.Box(low[0], high[0], (1,), dtype=np.float32),
                "angular-pos": gym.spaces.Dict(
                    {
                        "value": gym.spaces.Box(low[2], high[2], (), dtype=np.float32),
                        "some_random_stuff": gym.spaces.Discrete(3),
                    }
                ),
                "velocs": gym.spaces.Tuple(
                    [
                        gym.spaces.Box(low[1], high[1], (1,), dtype=np.float32),
                        gym.spaces.Box(low[3], high[3], (), dtype=np.float32),
                    ]
                ),
            }
        )

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        """CartPole's step, with the observation rearranged."""
        next_obs, reward, done, truncated, info = super().step(action)  # type: ignore[no-untyped-call]
        return self._compile_current_obs(next_obs), float(reward), done, truncated, info

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        """CartPole's reset, with the observation rearranged."""
        init_obs, init_info = super().reset(seed=seed, options=options)
        return self._compile_current_obs(init_obs), init_info

    def _compile_current_obs(self, original_cartpole_obs: Any) -> dict[str, Any]:
        # original_cartpole_obs is [x-pos, x-veloc, angle, angle-veloc]
        return {
            "x-pos": np.array([original_cartpole_obs[0]], np.float32),
            "angular-pos": {
                "value": np.array(original_cartpole_obs[2], np.float32),
                "some_random_stuff": int(self.np_random.integers(3)),
            },
            "velocs": (
                np.array([original_cartpole_obs[1]], np.float32),
                np.array(original_cartpole_obs[3], np.float32),
            ),
        }


def _get_state(env: CartPoleWithDictObservationSpace) -> dict[str, Any]:
    return {
        "state": None if env.state is None else np.array(env.state, copy=True),
        "steps_beyond_terminated": env.steps_beyond_terminated,
    }


def _set_state(env: CartPoleWithDictObservationSpace, state: dict[str, Any]) -> None:
    env.state = None if state["state"] is None else np.array(state["state"], copy=True)
    env.steps_beyond_terminated = state["steps_beyond_terminated"]


register_env_state_handler(CartPoleWithDictObservationSpace, _get_state, _set_state)

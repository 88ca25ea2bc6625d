"""RLlib's ``StatelessCartPole``: CartPole without its velocities, partially observable.

``ray.rllib.examples.envs.classes.stateless_cartpole``. The observation is
``[x-pos, angle]`` (CartPole's velocities are dropped), so that the cart's and the pole's
motion can only be told from several observations: a policy with memory (an LSTM) learns
it, a memoryless one does much worse.

Differs from RLlib's: the observation is float32 (RLlib's ``np.array`` of CartPole's
float32 values is float32 too, said here once for the type checker), and the env's state is
registered with cairn (:func:`~cairn.rl.env.env_state.register_env_state_handler`), so that
its episodes in flight survive a checkpoint. Register it with gymnasium to train on it
(``gymnasium.register("StatelessCartPole-v1", entry_point=StatelessCartPole,
max_episode_steps=500)``; RLlib's ``register_env("env", lambda cfg: StatelessCartPole())``
has no time limit).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium.envs.classic_control import CartPoleEnv
from gymnasium.spaces import Box

from cairn.rl.env.env_state import register_env_state_handler

__all__ = ["StatelessCartPole"]


class StatelessCartPole(CartPoleEnv):
    """Partially observable CartPole: the x- and angular velocities are removed from the observation.

    Args:
        config: Ignored (RLlib's env config argument).
    """

    def __init__(self, config: dict[str, Any] | None = None) -> None:
        super().__init__()
        # Fix our observation-space (remove 2 velocity components).
        high = np.array([self.x_threshold * 2, self.theta_threshold_radians * 2], dtype=np.float32)
        self.observation_space = Box(low=-high, high=high, dtype=np.float32)

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        """CartPole's step, observing ``[x-pos, angle]``."""
        next_obs, reward, done, truncated, info = super().step(action)  # type: ignore[no-untyped-call]
        # next_obs is [x-pos, x-veloc, angle, angle-veloc]
        return np.array([next_obs[0], next_obs[2]], dtype=np.float32), float(reward), done, truncated, info

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        """CartPole's reset, observing ``[x-pos, angle]``."""
        init_obs, init_info = super().reset(seed=seed, options=options)
        # init_obs is [x-pos, x-veloc, angle, angle-veloc]
        return np.array([init_obs[0], init_obs[2]], dtype=np.float32), init_info


def _get_state(env: StatelessCartPole) -> dict[str, Any]:
    return {
        "state": None if env.state is None else np.array(env.state, copy=True),
        "steps_beyond_terminated": env.steps_beyond_terminated,
    }


def _set_state(env: StatelessCartPole, state: dict[str, Any]) -> None:
    physics = state.get("state") if isinstance(state, dict) else None
    beyond = state.get("steps_beyond_terminated") if isinstance(state, dict) else None
    if (
        not isinstance(state, dict)
        or set(state) != {"state", "steps_beyond_terminated"}
        or (physics is not None and np.shape(physics) != (4,))
        or not (beyond is None or type(beyond) is int)
    ):
        raise ValueError(
            "the saved state of StatelessCartPole is not {'state': [4 floats] or None, 'steps_beyond_terminated': "
            "int or None}; the checkpoint was written by other code or tampered with."
        )
    env.state = None if physics is None else np.array(physics, dtype=np.float64, copy=True)
    env.steps_beyond_terminated = beyond  # type: ignore[assignment]  # gymnasium's annotation says None only


register_env_state_handler(StatelessCartPole, _get_state, _set_state)

"""RLlib's ``ActionMaskEnv``: a randomly acting environment that publishes an action mask each step.

``ray.rllib.examples.envs.classes.action_mask_env`` (on RLlib's ``RandomEnv``). The
observation is ``{"action_mask": Box(0, 1, (n,)), "observations": <observation_space>}``:
``action_mask`` marks the allowed actions with 1.0, the others with 0.0, and :meth:`step`
raises on an action the last mask did not allow. Observations and rewards are random.

Differs from RLlib's:

* RLlib's ``RandomEnv`` base is folded in (only what ``ActionMaskEnv`` uses): its config
  keys ``action_space`` (a ``Discrete``, default ``Discrete(2)``), ``observation_space``
  (default ``Discrete(2)``; a ``Box`` or ``Discrete``), ``reward_space`` (default
  ``Box(-1, 1, ())``), ``p_terminated`` (default 0.1) and ``max_episode_len``; not
  ``static_samples`` or ``check_action_bounds`` (refused when true).
* Everything random is drawn from the env's seeded ``np_random`` (RLlib samples the spaces'
  own unseeded RNGs and ``np.random``), so that runs are reproducible and a checkpoint holds
  all of it (cairn saves ``np_random``).
* A mask that allows no action (rounding gives one with probability ``2**-n``; RLlib's env
  then raises on whatever action is sent) allows one action, drawn at random: a small action
  space (tests) would otherwise fail every few hundred steps.
* ``reset`` passes ``seed`` on (RLlib's ignores it), and the env's state (its step count and
  the mask in force) is registered with cairn
  (:func:`~cairn.rl.env.env_state.register_env_state_handler`, with a ``check=``), so that
  its episodes in flight survive a checkpoint.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import numpy.typing as npt
from gymnasium.spaces import Box, Dict, Discrete

from cairn.rl.env.env_state import register_env_state_handler
from cairn.state_checks import count

__all__ = ["ActionMaskEnv"]


class ActionMaskEnv(gym.Env[dict[str, Any], int]):
    """A randomly acting environment that publishes an action mask each step (see the module docstring).

    Args:
        config: RLlib's ``RandomEnv`` settings (see the module docstring).

    Raises:
        ValueError: An action space that is not ``Discrete``, an observation or reward space
            this port cannot sample (not a ``Box`` or ``Discrete``), or a ``RandomEnv`` option
            it does not implement.
    """

    def __init__(self, config: dict[str, Any] | None = None) -> None:
        config = dict(config or {})
        for unsupported in ("static_samples", "check_action_bounds"):
            if config.get(unsupported):
                raise ValueError(f"ActionMaskEnv (cairn's port) does not implement RandomEnv's {unsupported}=True.")
        action_space = config.get("action_space", Discrete(2))
        # Masking only works for Discrete actions.
        if not isinstance(action_space, Discrete):
            raise ValueError(f"ActionMaskEnv needs a Discrete action_space, got {action_space!r}.")
        self.action_space = action_space
        inner = config.get("observation_space", Discrete(2))
        self.reward_space = config.get("reward_space", Box(low=-1.0, high=1.0, shape=(), dtype=np.float32))
        for name, space in (("observation_space", inner), ("reward_space", self.reward_space)):
            if not isinstance(space, Box | Discrete):
                raise ValueError(f"ActionMaskEnv samples Box or Discrete spaces; {name}={space!r} is neither.")
        p_terminated = config.get("p_terminated")
        self.p_terminated = float(config.get("p_done", 0.1) if p_terminated is None else p_terminated)
        self.max_episode_len = config.get("max_episode_len")
        self.steps = 0
        # Add action_mask to observations.
        self._mask_space = Box(0.0, 1.0, shape=(int(action_space.n),), dtype=np.float32)
        self._inner_space: Box | Discrete = inner
        self.observation_space = Dict({"action_mask": self._mask_space, "observations": inner})
        self.valid_actions: npt.NDArray[np.float32] | None = None

    def _sample(self, space: Box | Discrete) -> Any:
        """A value of ``space`` drawn from the env's ``np_random`` (bounded Boxes, as RLlib's spaces are)."""
        if isinstance(space, Discrete):
            return int(space.start + self.np_random.integers(int(space.n)))
        return self.np_random.uniform(space.low, space.high, size=space.shape).astype(space.dtype)

    def _observation(self) -> dict[str, Any]:
        obs = {"action_mask": self._sample(self._mask_space), "observations": self._sample(self._inner_space)}
        self._fix_action_mask(obs)
        return obs

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        """A random first observation with its action mask."""
        super().reset(seed=seed)
        self.steps = 0
        return self._observation(), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        """Refuse an action the last mask did not allow; else a random observation, reward and end.

        Raises:
            ValueError: ``action`` is not allowed by the current action mask.
        """
        # Check whether action is valid.
        if self.valid_actions is None or not self.valid_actions[int(action)]:
            raise ValueError(f"Invalid action ({action}) sent to env! valid_actions={self.valid_actions}")
        self.steps += 1
        terminated = False
        truncated = False
        # We are `truncated` as per our max-episode-len.
        if self.max_episode_len and self.steps >= self.max_episode_len:
            truncated = True
        # Max episode length not reached yet -> Sample `terminated` via `p_terminated`.
        elif self.p_terminated > 0.0:
            terminated = bool(self.np_random.random() < self.p_terminated)
        reward = float(self._sample(self.reward_space))
        return self._observation(), reward, terminated, truncated, {}

    def _fix_action_mask(self, obs: dict[str, Any]) -> None:
        # Fix action-mask: Everything larger 0.5 is 1.0, everything else 0.0.
        self.valid_actions = np.round(obs["action_mask"]).astype(np.float32)
        if not self.valid_actions.any():  # RLlib's may mask every action (1 in 2**n): then allow one
            self.valid_actions[int(self.np_random.integers(len(self.valid_actions)))] = 1.0
        obs["action_mask"] = self.valid_actions.copy()


def _get_state(env: ActionMaskEnv) -> dict[str, Any]:
    return {
        "steps": env.steps,
        "valid_actions": None if env.valid_actions is None else np.array(env.valid_actions, copy=True),
    }


def _check_state(env: ActionMaskEnv, state: Any) -> str | None:
    if not isinstance(state, dict) or set(state) != {"steps", "valid_actions"}:
        return "the saved state of ActionMaskEnv is not {'steps': int, 'valid_actions': array or None}"
    steps, valid = state["steps"], state["valid_actions"]
    if not count.fits(steps):
        return f"ActionMaskEnv's saved step count {steps!r:.40} is not an int >= 0"
    if valid is not None:
        n = int(env._mask_space.shape[0])
        array = np.asarray(valid) if isinstance(valid, np.ndarray) else None
        if array is None or array.shape != (n,) or array.dtype.kind not in "biuf":
            return f"ActionMaskEnv's saved action mask is not {n} numbers"
        if not np.isin(array, (0.0, 1.0)).all():
            return "ActionMaskEnv's saved action mask holds values other than 0 and 1"
    return None


def _set_state(env: ActionMaskEnv, state: dict[str, Any]) -> None:
    problem = _check_state(env, state)
    if problem is not None:
        raise ValueError(f"{problem}; the checkpoint was written by other code or tampered with.")
    env.steps = int(state["steps"])
    valid = state["valid_actions"]
    env.valid_actions = None if valid is None else np.array(valid, dtype=np.float32, copy=True)


register_env_state_handler(ActionMaskEnv, _get_state, _set_state, check=_check_state)

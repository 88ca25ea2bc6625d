"""RLlib's ``rllib/examples/envs/custom_gym_env.py``, ported to cairn.

Ported from ray-project/ray at commit 1af678bdaec171414ec0cf864431b5f2f4cbead0: your own
single-agent gymnasium Env (``SimpleCorridor``: walk right to the goal) learned by PPO.

Every line that differs from RLlib's, and why:

* ``.environment(SimpleCorridor, env_config=...)`` is RLlib's line: cairn records the class
  by reference (``"custom_gym_env:SimpleCorridor"``, allowed by ``@cairn.register`` in any
  program that imports this module) and builds ``SimpleCorridor(env_config)`` as RLlib does. Run as a script, the
  module imports itself under its own name (a class of ``__main__`` cannot be found again).
  RLlib's commented ``register_env("corridor-env", lambda config: SimpleCorridor(config))``
  works too (``cairn.rl.env.multi_agent_env.register_env``; the config records the name).
* ``SimpleCorridor.reset``/``step`` draw the goal reward with the env's seeded ``np_random``
  (``super().reset(seed=seed)``) instead of ``random.seed(seed)`` / ``random.uniform``: the
  global ``random`` is the whole process's (every env copy reseeds it), and a restored run
  is reproducible only with the env's own RNG, which cairn saves with the env.
* ``get_trainable_cls(args.algo).get_default_config()`` -> ``PPOConfig()``;
  ``add_rllib_example_script_args`` / ``run_rllib_example_script_experiment`` -> ``main(iterations, corridor_length)``.

Run it::

    python examples/rllib/custom_gym_env.py
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from example_output import print_iteration
from gymnasium.spaces import Box, Discrete

import cairn
from cairn.rl.algorithms.ppo import PPOConfig


@cairn.register
class SimpleCorridor(gym.Env[np.ndarray, int]):  # type: ignore[type-arg]
    """Example of a custom env in which the agent has to walk down a corridor.

    ------------
    |S........G|
    ------------
    , where S is the starting position, G is the goal position, and fields with '.'
    mark free spaces, over which the agent may step. The length of the above example
    corridor is 10.
    Allowed actions are left (0) and right (1).
    The reward function is -0.01 per step taken and a uniform random value between
    0.5 and 1.5 when reaching the goal state.

    You can configure the length of the corridor via the env's config. Thus, in your
    AlgorithmConfig, you can do:
    `config.environment(env_config={"corridor_length": ..})`.
    """

    def __init__(self, config: dict[str, Any] | None = None) -> None:
        config = config or {}
        self.end_pos = config.get("corridor_length", 7)
        self.cur_pos = 0
        self.action_space = Discrete(2)
        self.observation_space = Box(0.0, self.end_pos, shape=(1,), dtype=np.float32)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        """Back to the start."""
        super().reset(seed=seed)
        self.cur_pos = 0
        # Return obs and (empty) info dict.
        return np.array([self.cur_pos], np.float32), {"env_state": "reset"}

    def step(self, action: int) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        """Move; a random reward in [0.5, 1.5] at the goal, -0.01 elsewhere."""
        assert action in [0, 1], action
        # Move left.
        if action == 0 and self.cur_pos > 0:
            self.cur_pos -= 1
        # Move right.
        elif action == 1:
            self.cur_pos += 1

        # The environment only ever terminates when we reach the goal state.
        terminated = self.cur_pos >= self.end_pos
        truncated = False
        # Produce a random reward from [0.5, 1.5] when we reach the goal.
        reward = float(self.np_random.uniform(0.5, 1.5)) if terminated else -0.01
        infos: dict[str, Any] = {}
        return (
            np.array([self.cur_pos], np.float32),
            reward,
            terminated,
            truncated,
            infos,
        )


def main(iterations: int = 2, corridor_length: int = 10) -> dict[str, Any]:
    """Train ``iterations`` times; return the last result."""
    base_config = PPOConfig().environment(
        SimpleCorridor,  # or "corridor-env" after register_env("corridor-env", lambda config: SimpleCorridor(config))
        env_config={"corridor_length": corridor_length},
    )

    algo = base_config.build_algo()
    try:
        result: dict[str, Any] = {}
        for _ in range(iterations):
            result = algo.train()
            print_iteration(result)
        return result
    finally:
        algo.stop()


if __name__ == "__main__":
    import custom_gym_env  # run the module, not __main__ (the config names the class in this module)

    custom_gym_env.main()

"""RLlib's ``rllib/examples/rl_modules/action_masking_rl_module.py``, ported to cairn.

Ported from ray-project/ray at commit 0cf79cd2bce0f91316a8c58f4d4bbcc14e26e0ac: an RLModule
that masks actions (``ActionMaskingTorchRLModule``) on ``ActionMaskEnv``, whose Dict
observation ``{"action_mask", "observations"}`` reaches the module unflattened; PPO trains
it and no masked action is ever sent to the env (the env raises on one). The env is random
(random observations and rewards): the agent cannot learn, only obey the mask.

Every line that differs from RLlib's, and why:

* ``from ray.rllib...`` -> ``cairn.rl...``: ``PPOConfig`` from ``cairn.rl.algorithms.ppo``,
  ``RLModuleSpec`` from ``cairn.rl.core.rl_module.rl_module``, ``ActionMaskEnv`` and
  ``ActionMaskingTorchRLModule`` from their ``cairn.rl.examples`` ports (the env draws from
  its seeded ``np_random``; the module is built on cairn's ``TorchRLModule`` and says
  ``takes_nested_observations = True``).
* ``.environment(env=ActionMaskEnv, ...)`` -> ``env="cairn.rl.examples...:ActionMaskEnv"``:
  cairn records the env by reference (an imported module's class), never by pickling it.
* ``.env_runners(observation_filter=None)`` added: cairn's default config normalises
  observations (``MeanStdFilter``), which takes arrays, not the Dict the module reads;
  RLlib's default is no filter.
* ``.evaluation(evaluation_num_env_runners=1, evaluation_interval=1,
  evaluation_parallel_to_training=True)`` -> ``.evaluation(evaluation_interval=1,
  evaluation_duration=...)`` on the local evaluation runner: parallel evaluation on its own
  Ray actor is a speed-up that a CI-sized run does not need.
* ``add_rllib_example_script_args`` / ``run_rllib_example_script_experiment`` (Tune) and the
  ``--algo`` check -> ``main(...)``; the train batch and ``num_epochs`` are main() arguments
  (CI-sized runs); ``main`` returns the last result and the algorithm's module.

Run it::

    python examples/rllib/action_masking_rl_module.py
"""

from __future__ import annotations

from typing import Any

from example_output import print_iteration
from gymnasium.spaces import Box, Discrete

from cairn.rl.algorithms.ppo import PPOConfig
from cairn.rl.core.rl_module.rl_module import RLModuleSpec
from cairn.rl.examples.envs.classes.action_mask_env import ActionMaskEnv
from cairn.rl.examples.rl_modules.classes.action_masking_rlm import ActionMaskingTorchRLModule

ENV = f"{ActionMaskEnv.__module__}:{ActionMaskEnv.__qualname__}"


def main(iterations: int = 10, train_batch_size: int = 4000, num_epochs: int = 30) -> Any:
    """Train ``iterations`` times; return the last result and the trained module."""
    base_config = (
        PPOConfig()
        .environment(
            env=ENV,
            env_config={
                "action_space": Discrete(100),
                # This defines the 'original' observation space that is used in the
                # `RLModule`. The environment will wrap this space into a
                # `gym.spaces.Dict` together with an 'action_mask' that signals the
                # `RLModule` to adapt the action distribution inputs.
                "observation_space": Box(-1.0, 1.0, (5,)),
            },
        )
        .env_runners(observation_filter=None)
        .training(train_batch_size_per_learner=train_batch_size, minibatch_size=min(128, train_batch_size))
        .rl_module(
            # We need to explicitly specify here RLModule to use.
            rl_module_spec=RLModuleSpec(
                module_class=ActionMaskingTorchRLModule,
                model_config={
                    "head_fcnet_hiddens": [64, 64],
                    "head_fcnet_activation": "relu",
                },
            ),
        )
        .evaluation(evaluation_interval=1, evaluation_duration=min(10, train_batch_size))
    )
    base_config.training(num_epochs=num_epochs)

    algo = base_config.build_algo()
    try:
        result: dict[str, Any] = {}
        for _ in range(iterations):
            result = algo.train()
            print_iteration(result)
        return {"result": result, "module": algo.env_runner.module["default_policy"]}
    finally:
        algo.stop()


if __name__ == "__main__":
    main()

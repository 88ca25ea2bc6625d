"""RLlib's ``rllib/examples/connectors/flatten_observations_dict_space.py``, ported to cairn.

Ported from ray-project/ray at commit 1f233c9f42faebaf685b2556cde9a9240a47e21c: the
``FlattenObservations`` connector piece flattens CartPole's observation, taken apart into a
nested Dict/Tuple (``CartPoleWithDictObservationSpace``), into one 1-D array for the module.

Every line that differs from RLlib's, and why:

* ``from ray.rllib.connectors.env_to_module import FlattenObservations`` ->
  ``cairn.rl.connectors.env_to_module``; ``CartPoleWithDictObservationSpace`` from
  ``cairn.rl.examples.envs.classes.cartpole_with_dict_observation_space`` (its random extra
  value is drawn from the env's seeded ``np_random``).
* ``_env_to_module_pipeline(env, spaces, device)`` (a closure) and ``register_env("env",
  lambda _: CartPoleWithDictObservationSpace())`` as RLlib writes them, in ``main()`` (RLlib:
  under ``if __name__ == "__main__":``); ``register_env`` from ``cairn.rl.env.multi_agent_env``.
  A checkpoint records only that they existed (issue 39).
* ``--num-agents`` (``MultiAgentCartPoleWithDictObservationSpace``) dropped: cairn's
  multi-agent env runner does not call connector factories yet (its per-module pipelines come
  with the multi-agent part of issue 27).
* ``DefaultModelConfig`` from ``cairn.rl.core.rl_module.default_model_config``; RLlib's
  ``DefaultModelConfig(fcnet_hiddens=[32], fcnet_activation="linear", vf_share_layers=True)``
  is kept as RLlib writes it.
* ``get_trainable_cls(args.algo).get_default_config()`` -> ``PPOConfig()`` (the IMPALA branch
  goes with it); ``add_rllib_example_script_args`` / ``run_rllib_example_script_experiment``
  -> ``main(...)``; the train batch and ``num_epochs`` are main() arguments (CI-sized runs).

Run it::

    python examples/rllib/flatten_observations_dict_space.py
"""

from __future__ import annotations

from typing import Any

from example_output import print_iteration

from cairn.rl.algorithms.ppo import PPOConfig
from cairn.rl.connectors.env_to_module import FlattenObservations
from cairn.rl.core.rl_module.default_model_config import DefaultModelConfig
from cairn.rl.env.multi_agent_env import register_env
from cairn.rl.examples.envs.classes.cartpole_with_dict_observation_space import CartPoleWithDictObservationSpace


def main(iterations: int = 2, train_batch_size: int = 4000, num_epochs: int = 6) -> Any:
    """Train ``iterations`` times; return the last result, the module's observation space and the module."""

    # Define env-to-module-connector pipeline for the new stack.
    def _env_to_module_pipeline(env: Any, spaces: Any, device: Any) -> FlattenObservations:
        return FlattenObservations(multi_agent=False)

    # Register our environment with tune.
    register_env("env", lambda _: CartPoleWithDictObservationSpace())

    # Define the AlgorithmConfig used.
    base_config = (
        PPOConfig()
        .environment("env")
        .env_runners(env_to_module_connector=_env_to_module_pipeline)
        .training(
            gamma=0.99,
            lr=0.0003,
            train_batch_size_per_learner=train_batch_size,
            minibatch_size=min(128, train_batch_size),
        )
        .rl_module(
            model_config=DefaultModelConfig(
                fcnet_hiddens=[32],
                fcnet_activation="linear",
                vf_share_layers=True,
            ),
        )
    )

    # PPO-specific settings (for better learning behavior only).
    base_config.training(
        num_epochs=num_epochs,
        vf_loss_coeff=0.01,
    )

    algo = base_config.build_algo()
    try:
        result: dict[str, Any] = {}
        for _ in range(iterations):
            result = algo.train()
            print_iteration(result)
        return {
            "result": result,
            "observation_space": algo.env_runner.observation_space,
            "module": algo.get_module("default_policy"),
        }
    finally:
        algo.stop()


if __name__ == "__main__":
    main()

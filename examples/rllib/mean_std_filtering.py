"""RLlib's ``rllib/examples/connectors/mean_std_filtering.py``, ported to cairn.

Ported from ray-project/ray at commit 02a07cc479abd25d7432d44ed17066b729e6af9c: PPO on
Pendulum (or ``--num-agents`` copies of it) with a running mean/std filter on the
observations, whose statistics are part of every checkpoint.

Every line that differs from RLlib's, and why:

* ``env_to_module_connector=(lambda env: MeanStdFilter(multi_agent=args.num_agents > 0))`` and
  ``policy_mapping_fn=lambda aid, *a, **kw: f"p{aid}"`` are RLlib's lambdas, kept (a checkpoint
  records only that they existed, and a new process's ``from_checkpoint`` asks for them:
  docs/rl.md "Lambdas and closures"); ``MeanStdFilter`` is imported from RLlib's path with
  ``ray.rllib`` -> ``cairn.rl``.
* ``MultiAgentPendulum`` and ``register_env`` from ``cairn.rl.examples.envs.classes.multi_agent``
  and ``cairn.rl.env.multi_agent_env``; ``try_import_torch()`` -> ``import torch``.
* ``get_trainable_cls(args.algo).get_default_config()`` -> ``PPOConfig()``.
* ``add_rllib_example_script_args`` / ``run_rllib_example_script_experiment`` -> ``main(...)``;
  the stop criteria (iterations, return, timesteps) -> ``iterations``.
* ``mini_batch_size_per_learner=64`` and ``vf_clip_param=10.0`` are kept as RLlib writes them
  (cairn takes RLlib's older name of ``minibatch_size``, and clips the value loss as RLlib does).
* ``lr=0.0003 * (args.num_gpus or 1)`` -> ``lr=0.0003``: cairn trains on CPU.
* ``.evaluation(...)`` is kept but for ``evaluation_parallel_to_training=True`` (cairn evaluates
  after training in each iteration) and ``evaluation_num_env_runners=1`` -> an argument (0 by
  default: a local evaluation runner, no Ray). ``evaluation_config={"explore": False,
  "use_worker_filter_stats": False}`` is RLlib's: cairn's evaluation runners always take the
  training runners' merged filter statistics before each evaluation and drop their own; the
  stop criterion on evaluation returns -> the returned result.
* ``model_config_dict`` is kept as RLlib writes it: ``torch.nn.init.xavier_uniform_`` and
  ``torch.nn.init.constant_`` (with ``{"val": 0.0}``) initialize the encoder's layers; the
  config records them by name (``"xavier_uniform_"``), which the module looks up in a fixed
  list of ``torch.nn.init``'s functions (a checkpoint never holds code; another callable is
  refused); ``uses_new_env_runners=True`` is taken (cairn has only those). The ``else``
  branch for the old API stack (``training(model=...)``) is gone: cairn has only the new stack.
* ``num_envs_per_env_runner=... else 20`` -> ``... else 4``: a CI-sized run.

Run it::

    python examples/rllib/mean_std_filtering.py
"""

from __future__ import annotations

from typing import Any

import torch
from example_output import print_iteration

from cairn.rl.algorithms.ppo import PPOConfig
from cairn.rl.connectors.env_to_module.mean_std_filter import MeanStdFilter
from cairn.rl.env.multi_agent_env import register_env
from cairn.rl.examples.envs.classes.multi_agent import MultiAgentPendulum


def main(iterations: int = 2, num_agents: int = 0, evaluation_num_env_runners: int = 0) -> Any:
    """Train ``iterations`` times; return the algorithm's last result and the algorithm (stopped)."""
    # Register our environment with tune.
    if num_agents > 0:
        register_env(
            "env",
            lambda _: MultiAgentPendulum(config={"num_agents": num_agents}),
        )

    config = (
        PPOConfig()
        .environment("env" if num_agents > 0 else "Pendulum-v1")
        .env_runners(
            num_envs_per_env_runner=1 if num_agents > 0 else 4,
            # Define a (single-agent or multi-agent) MeanStdFilter connector piece for the
            # env-to-module pipeline.
            env_to_module_connector=(lambda env: MeanStdFilter(multi_agent=num_agents > 0)),
        )
        .training(
            train_batch_size_per_learner=512,
            mini_batch_size_per_learner=64,
            gamma=0.95,
            lr=0.0003,
            lambda_=0.1,
            vf_clip_param=10.0,
            vf_loss_coeff=0.01,
        )
        .evaluation(
            evaluation_num_env_runners=evaluation_num_env_runners,
            evaluation_interval=1,
            evaluation_duration=10,
            evaluation_duration_unit="episodes",
            evaluation_config={
                "explore": False,
                # Do NOT use the eval EnvRunners' ConnectorV2 states: before each evaluation they
                # get the training EnvRunners' merged states and discard their own.
                "use_worker_filter_stats": False,
            },
        )
    )
    config = config.rl_module(
        model_config_dict={
            "fcnet_activation": "relu",
            "fcnet_weights_initializer": torch.nn.init.xavier_uniform_,
            "fcnet_bias_initializer": torch.nn.init.constant_,
            "fcnet_bias_initializer_config": {"val": 0.0},
            "uses_new_env_runners": True,
        }
    )

    # Add a simple multi-agent setup.
    if num_agents > 0:
        config = config.multi_agent(
            policies={f"p{i}" for i in range(num_agents)},
            policy_mapping_fn=lambda aid, *a, **kw: f"p{aid}",
        )

    algo = config.build_algo()
    try:
        result: dict[str, Any] = {}
        for _ in range(iterations):
            result = algo.train()
            print_iteration(result)
        return result, algo
    finally:
        algo.stop()


if __name__ == "__main__":
    main()

"""RLlib's ``rllib/examples/multi_agent/rock_paper_scissors_learned_vs_learned.py``, ported to cairn.

Ported from ray-project/ray at commit 2c2c70c1a0abde23698a5cfd11d08e76b2336c5c: two learning
PPO modules, ``p0`` and ``p1``, play PettingZoo's rock-paper-scissors (``rps_v2``) against each
other; ``player_0`` plays with ``p0``, ``player_1`` with ``p1``. Neither should beat the
other in the long run (the best strategy is to play at random), though one may exploit the
other's habits for a while.

Every line that differs from RLlib's, and why:

* ``from ray.rllib...`` -> ``from cairn.rl...`` (the same module paths:
  ``connectors.env_to_module.FlattenObservations``,
  ``core.rl_module.default_model_config.DefaultModelConfig``,
  ``core.rl_module.multi_rl_module.MultiRLModuleSpec``, ``core.rl_module.rl_module.RLModuleSpec``,
  ``env.wrappers.pettingzoo_env.ParallelPettingZooEnv``); ``from ray.tune.registry import
  register_env`` -> ``from cairn.rl.env.multi_agent_env import register_env``.
* ``env_to_module_connector=(lambda env, spaces, device: FlattenObservations(multi_agent=True))``
  and ``policy_mapping_fn=lambda aid, episode: re.sub("^player_", "p", aid)`` are RLlib's
  lambdas, kept (a checkpoint records only that they existed, and a new process's
  ``from_checkpoint`` asks for them: docs/rl.md "Lambdas and closures").
* ``--use-lstm`` -> ``main(use_lstm=...)``; ``get_trainable_cls(args.algo).get_default_config()``
  -> ``PPOConfig()``; ``add_rllib_example_script_args`` / ``run_rllib_example_script_experiment``
  -> ``main(iterations, ...)``; ``assert args.num_agents == 2`` goes with the argument parser.
* ``train_batch_size`` and ``num_epochs`` are main() arguments (defaults: cairn's PPO's), for
  CI-sized runs; RLlib's script leaves them at its defaults.

Everything else is RLlib's: ``DefaultModelConfig(use_lstm=..., fcnet_hiddens=[32] if use_lstm
else [256, 256], lstm_cell_size=256, max_seq_len=15, vf_share_layers=True)`` (one encoder, and
LSTM, shared by the policy and value heads), ``vf_loss_coeff=0.005``, and the two module specs.

Run it::

    python examples/rllib/rock_paper_scissors_learned_vs_learned.py
"""

from __future__ import annotations

import re
from typing import Any

from example_output import print_iteration
from pettingzoo.classic import rps_v2

from cairn.rl.algorithms.ppo import PPOConfig
from cairn.rl.connectors.env_to_module import FlattenObservations
from cairn.rl.core.rl_module.default_model_config import DefaultModelConfig
from cairn.rl.core.rl_module.multi_rl_module import MultiRLModuleSpec
from cairn.rl.core.rl_module.rl_module import RLModuleSpec
from cairn.rl.env.multi_agent_env import register_env
from cairn.rl.env.wrappers.pettingzoo_env import ParallelPettingZooEnv

register_env(
    "pettingzoo_rps",
    lambda _: ParallelPettingZooEnv(rps_v2.parallel_env()),
)


def main(
    iterations: int = 2, use_lstm: bool = False, train_batch_size: int | None = None, num_epochs: int | None = None
) -> dict[str, Any]:
    """Train ``iterations`` times; return the last result and the algorithm's ``p0`` module."""
    base_config = (
        PPOConfig()
        .environment("pettingzoo_rps")
        .env_runners(
            env_to_module_connector=(lambda env, spaces, device: FlattenObservations(multi_agent=True)),
        )
        .multi_agent(
            policies={"p0", "p1"},
            # `player_0` uses `p0`, `player_1` uses `p1`.
            policy_mapping_fn=lambda aid, episode: re.sub("^player_", "p", aid),
        )
        .training(
            vf_loss_coeff=0.005,
        )
        .rl_module(
            model_config=DefaultModelConfig(
                use_lstm=use_lstm,
                # Use a simpler FCNet when we also have an LSTM.
                fcnet_hiddens=[32] if use_lstm else [256, 256],
                lstm_cell_size=256,
                max_seq_len=15,
                vf_share_layers=True,
            ),
            rl_module_spec=MultiRLModuleSpec(
                rl_module_specs={
                    "p0": RLModuleSpec(),
                    "p1": RLModuleSpec(),
                }
            ),
        )
    )
    if train_batch_size is not None:  # CI-sized runs (RLlib's script keeps its defaults)
        base_config.training(train_batch_size_per_learner=train_batch_size, minibatch_size=train_batch_size)
    if num_epochs is not None:
        base_config.training(num_epochs=num_epochs)

    algo = base_config.build_algo()
    try:
        result: dict[str, Any] = {}
        for _ in range(iterations):
            result = algo.train()
            print_iteration(result)
        return {"result": result, "module": algo.get_module("p0")}
    finally:
        algo.stop()


if __name__ == "__main__":
    main()

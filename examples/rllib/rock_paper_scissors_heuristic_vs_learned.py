"""RLlib's ``rllib/examples/multi_agent/rock_paper_scissors_heuristic_vs_learned.py``, ported to cairn.

Ported from ray-project/ray at commit 0fb84ff42cd485baf37b576768589056aa1e347d: a learning
PPO module (``"learned"``) plays rock-paper-scissors against one of two hand-coded
modules, ``"always_same"`` or ``"beat_last"``, drawn per episode; only ``"learned"`` trains.

Every line that differs from RLlib's, and why:

* ``from pettingzoo.classic import rps_v2`` and ``register_env("pettingzoo_rps", lambda _:
  ParallelPettingZooEnv(rps_v2.parallel_env()))`` -> ``.environment(RockPaperScissors)``
  (``cairn.rl.examples.envs.classes.multi_agent.rock_paper_scissors``, RLlib's own env
  class of this game), agents ``"player1"``/``"player2"`` (PettingZoo's: ``"player_0"``/
  ``"player_1"``): PettingZoo's game observes a ``Discrete`` move, which RLlib one-hots
  with its ``FlattenObservations`` connector; cairn has no such connector, and its
  ``RockPaperScissors`` observes the opponent's last move one-hot (a ``Box``).
* ``env_to_module_connector=lambda env: (FlattenObservations(...),)`` dropped (see above).
* ``AlwaysSameHeuristicRLM``, ``BeatLastHeuristicRLM`` from
  ``cairn.rl.examples.rl_modules.classes.rock_paper_scissors_heuristic_rlm`` (RLlib's path):
  parameterless ``TorchRLModule`` classes as RLlib's, without per-episode state (how they differ
  is said there).
* ``policy_mapping_fn=lambda aid, episode: ("learned" if aid == "player_0" else
  random.choice([...]))`` as RLlib writes it, with cairn's agent id ``"player1"`` (a checkpoint
  records only that it existed, and a new process's ``from_checkpoint`` asks for it:
  docs/rl.md "Lambdas and closures").
* ``DefaultModelConfig(use_lstm=args.use_lstm, fcnet_hiddens=[32] if args.use_lstm else
  [256, 256], lstm_cell_size=256, max_seq_len=15, vf_share_layers=True)`` is kept as RLlib
  writes it, ``--use-lstm`` -> ``main(use_lstm=...)``: one shared encoder (and LSTM) under the
  policy and value heads, the LSTM's memory per agent in the env runner's checkpoint.
* ``get_trainable_cls(args.algo).get_default_config()`` -> ``PPOConfig()``;
  ``add_rllib_example_script_args`` / ``run_rllib_example_script_experiment`` -> ``main(iterations)``;
  the stop criterion ``env_runners/module_episode_returns_mean/learned`` -> cairn's key
  ``env_runners/module_episode_returns_mean/learned`` in the returned result.
* ``TRAINING_ITERATION``, ``ENV_RUNNER_RESULTS``, ``NUM_ENV_STEPS_SAMPLED_LIFETIME``: cairn has
  no such constants.

Run it::

    python examples/rllib/rock_paper_scissors_heuristic_vs_learned.py
"""

from __future__ import annotations

import random
from typing import Any

from example_output import print_iteration

from cairn.rl.algorithms.ppo import PPOConfig
from cairn.rl.core.rl_module.default_model_config import DefaultModelConfig
from cairn.rl.core.rl_module.multi_rl_module import MultiRLModuleSpec
from cairn.rl.core.rl_module.rl_module import RLModuleSpec
from cairn.rl.examples.envs.classes.multi_agent.rock_paper_scissors import RockPaperScissors
from cairn.rl.examples.rl_modules.classes.rock_paper_scissors_heuristic_rlm import (
    AlwaysSameHeuristicRLM,
    BeatLastHeuristicRLM,
)


def main(iterations: int = 2, use_lstm: bool = False) -> dict[str, Any]:
    """Train ``iterations`` times (``use_lstm``: RLlib's ``--use-lstm``); return the last result."""
    base_config = (
        PPOConfig()
        .environment(RockPaperScissors)
        .multi_agent(
            policies={"always_same", "beat_last", "learned"},
            # Let learning Policy always play against either heuristic one:
            # `always_same` or `beat_last`.
            policy_mapping_fn=lambda aid, episode: (
                "learned" if aid == "player1" else random.choice(["always_same", "beat_last"])
            ),
            # Must define this as both heuristic RLMs will throw an error, if their
            # `forward_train` is called.
            policies_to_train=["learned"],
        )
        .training(
            vf_loss_coeff=0.005,
        )
        .rl_module(
            rl_module_spec=MultiRLModuleSpec(
                rl_module_specs={
                    "always_same": RLModuleSpec(
                        module_class=AlwaysSameHeuristicRLM,
                    ),
                    "beat_last": RLModuleSpec(
                        module_class=BeatLastHeuristicRLM,
                    ),
                    "learned": RLModuleSpec(
                        model_config=DefaultModelConfig(
                            use_lstm=use_lstm,
                            # Use a simpler FCNet when we also have an LSTM.
                            fcnet_hiddens=[32] if use_lstm else [256, 256],
                            lstm_cell_size=256,
                            max_seq_len=15,
                            vf_share_layers=True,
                        ),
                    ),
                }
            ),
        )
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
    main()

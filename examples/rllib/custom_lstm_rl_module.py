"""RLlib's ``rllib/examples/rl_modules/custom_lstm_rl_module.py``, ported to cairn.

Ported from ray-project/ray at commit 9430709681f0dea3aff0ce2a1f60d4545c56c64f: a custom
LSTM-containing ``TorchRLModule`` (``LSTMContainingRLModule``: ``setup()`` builds an LSTM, a
stack of dense layers, a policy and a value head; ``_forward`` reads ``Columns.STATE_IN`` and
returns ``Columns.STATE_OUT``) trained by PPO on ``StatelessCartPole``, CartPole without its
velocities: only a policy with memory can tell where the cart and the pole are going.

cairn's env runner keeps each env slot's LSTM state (fed as ``Columns.STATE_IN``, reset when
an episode starts, checkpointed with the episodes in flight); PPO trains the module on
zero-padded sequences of at most ``max_seq_len`` steps with a loss mask.

Every line that differs from RLlib's, and why:

* ``from ray.rllib...`` -> ``cairn.rl...``: ``StatelessCartPole`` from
  ``cairn.rl.examples.envs.classes.stateless_cartpole``, ``LSTMContainingRLModule`` from
  ``cairn.rl.examples.rl_modules.classes.lstm_containing_rlm``.
* ``register_env("env", lambda cfg: StatelessCartPole())`` as RLlib writes it, in ``main()``
  (RLlib: under ``if __name__ == "__main__":``); ``register_env`` from
  ``cairn.rl.env.multi_agent_env``. A checkpoint records only that the creator existed (issue 39).
* ``--num-agents`` (``MultiAgentStatelessCartPole``) dropped: that env class is not ported
  (cairn's multi-agent env runner keeps per-agent LSTM states; see docs/rl.md).
* ``get_trainable_cls(args.algo).get_default_config()`` -> ``PPOConfig()``;
  ``add_rllib_example_script_args`` / ``run_rllib_example_script_experiment`` (stop at a return
  of 300 or 2M timesteps) -> ``main(...)``, whose arguments size the run (``lstm_cell_size``,
  ``dense_layers``, the train batch, ``num_epochs``; RLlib's 256/[256, 256]/1024/6 are the
  defaults).

Run it::

    python examples/rllib/custom_lstm_rl_module.py
"""

from __future__ import annotations

from typing import Any

from example_output import print_iteration

from cairn.rl.algorithms.ppo import PPOConfig
from cairn.rl.core.rl_module.rl_module import RLModuleSpec
from cairn.rl.env.multi_agent_env import register_env
from cairn.rl.examples.envs.classes.stateless_cartpole import StatelessCartPole
from cairn.rl.examples.rl_modules.classes.lstm_containing_rlm import LSTMContainingRLModule


def main(
    iterations: int = 100,
    *,
    lstm_cell_size: int = 256,
    dense_layers: tuple[int, ...] = (256, 256),
    train_batch_size: int = 1024,
    num_epochs: int = 6,
    stop_reward: float = 300.0,
) -> dict[str, Any]:
    """Train until the mean return reaches ``stop_reward`` or ``iterations``; return the last result."""
    register_env("env", lambda cfg: StatelessCartPole())

    base_config = (
        PPOConfig()
        .environment(env="env")
        .training(
            train_batch_size_per_learner=train_batch_size,
            num_epochs=num_epochs,
            lr=0.0009,
            vf_loss_coeff=0.001,
            entropy_coeff=0.0,
        )
        .rl_module(
            # Plug-in our custom RLModule class.
            rl_module_spec=RLModuleSpec(
                module_class=LSTMContainingRLModule,
                # Feel free to specify your own `model_config` settings below.
                # The `model_config` defined here will be available inside your
                # custom RLModule class through the `self.model_config`
                # property.
                model_config={
                    "lstm_cell_size": lstm_cell_size,
                    "dense_layers": list(dense_layers),
                    "max_seq_len": 20,
                },
            ),
        )
    )

    algo = base_config.build_algo()
    try:
        result: dict[str, Any] = {}
        for _ in range(iterations):
            result = algo.train()
            returns = result["env_runners"]["episode_return_mean"]
            print_iteration(result)
            if returns >= stop_reward:
                break
        module = algo.get_module()
        return {"result": result, "module": module, "state": module.get_initial_state()}
    finally:
        algo.stop()


if __name__ == "__main__":
    main()

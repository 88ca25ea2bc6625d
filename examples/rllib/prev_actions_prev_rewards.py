"""RLlib's ``rllib/examples/connectors/prev_actions_prev_rewards.py``, ported to cairn.

Ported from ray-project/ray at commit 06ec0d1879f053a2db827cf2d8bb762239ab40a2: the
``PrevActionsPrevRewards`` connector piece adds each episode's last actions and rewards to
the observation (a ``Dict``), ``FlattenObservations`` flattens it again, and PPO's default
LSTM module learns ``StatelessCartPole`` (CartPole without velocities) with that context.

cairn's env runner hands the piece each env slot's previous action and reward; the piece's
per-slot windows and the runner's last actions and rewards are checkpointed with the
episodes in flight, so a restored run goes on exactly.

Every line that differs from RLlib's, and why:

* ``from ray.rllib...`` -> ``cairn.rl...``; ``StatelessCartPole`` from
  ``cairn.rl.examples.envs.classes.stateless_cartpole``.
* ``_env_to_module(env)`` (a closure, ``multi_agent=False``) and ``register_env("env", lambda _:
  StatelessCartPole())`` as RLlib writes them, in ``main()`` (RLlib: under ``if __name__ ==
  "__main__":``); ``register_env`` from ``cairn.rl.env.multi_agent_env``. A checkpoint records
  only that they existed (issue 39).
* ``--num-agents`` (``MultiAgentStatelessCartPole``) dropped: the env class is not ported, and
  cairn's multi-agent env runner does not pass previous actions and rewards to pieces yet.
* ``model_config_dict`` is RLlib's (``use_lstm``, ``max_seq_len`` (a main() argument, 50),
  ``fcnet_hiddens=[32]``, ``fcnet_activation="linear"``, ``vf_share_layers=True``,
  ``nn.init.xavier_uniform_``, ``uses_new_env_runners``) but for
  ``"fcnet_bias_initializer": functools.partial(nn.init.constant_, 0.0)`` ->
  ``"fcnet_bias_initializer": "constant_", "fcnet_bias_initializer_kwargs": {"val": 0.0}``: a
  partial is code, and cairn records initializers by name (a ``torch.nn.init`` function itself
  is recorded by its name); ``torch, nn = try_import_torch()`` -> ``from torch import nn``.
* ``add_rllib_example_script_args`` / ``run_rllib_example_script_experiment`` (stop at a return
  of 200) -> ``main(...)``; the train batch and ``num_epochs`` are arguments (CI-sized runs).

Run it::

    python examples/rllib/prev_actions_prev_rewards.py
"""

from __future__ import annotations

from typing import Any

from example_output import print_iteration
from torch import nn

from cairn.rl.algorithms.ppo import PPOConfig
from cairn.rl.connectors.env_to_module import FlattenObservations, PrevActionsPrevRewards
from cairn.rl.env.multi_agent_env import register_env
from cairn.rl.examples.envs.classes.stateless_cartpole import StatelessCartPole

N_PREV_REWARDS = 1
N_PREV_ACTIONS = 1


def main(
    iterations: int = 250,
    *,
    train_batch_size: int = 4000,
    num_epochs: int = 6,
    max_seq_len: int = 50,
    stop_reward: float = 200.0,
) -> dict[str, Any]:
    """Train until the mean return reaches ``stop_reward`` or ``iterations``; return the last result."""

    # Define our custom connector pipelines.
    def _env_to_module(env: Any) -> list[Any]:
        # Create the env-to-module connector pipeline.
        return [
            # AddObservationsFromEpisodesToBatch(),
            PrevActionsPrevRewards(
                multi_agent=False,
                n_prev_rewards=N_PREV_REWARDS,
                n_prev_actions=N_PREV_ACTIONS,
            ),
            FlattenObservations(multi_agent=False),
            # WriteObservationsToEpisodes(),
        ]

    # Register our environment with tune.
    register_env("env", lambda _: StatelessCartPole())

    config = (
        PPOConfig()
        .environment("env")
        .env_runners(env_to_module_connector=_env_to_module)
        .training(
            num_epochs=num_epochs,
            lr=0.0003,
            train_batch_size=train_batch_size,
            vf_loss_coeff=0.01,
        )
        .rl_module(
            model_config_dict={
                "use_lstm": True,
                "max_seq_len": max_seq_len,
                "fcnet_hiddens": [32],
                "fcnet_activation": "linear",
                "vf_share_layers": True,
                "fcnet_weights_initializer": nn.init.xavier_uniform_,
                "fcnet_bias_initializer": "constant_",
                "fcnet_bias_initializer_kwargs": {"val": 0.0},
                "uses_new_env_runners": True,
            }
        )
    )

    algo = config.build_algo()
    try:
        result: dict[str, Any] = {}
        for _ in range(iterations):
            result = algo.train()
            returns = result["env_runners"]["episode_return_mean"]
            print_iteration(result)
            if returns >= stop_reward:
                break
        runner = algo.env_runner
        return {
            "result": result,
            "observation_space": runner.observation_space,
            "env_state": runner.get_state()["env"],
            "model_config": algo.get_module("default_policy").model_config,
        }
    finally:
        algo.stop()


if __name__ == "__main__":
    main()

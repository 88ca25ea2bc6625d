"""RLlib's ``rllib/examples/algorithms/dqn/cartpole_dqn.py``, ported to cairn.

Ported from ray-project/ray at commit 5d6ba4e2af08a868508c05f260352fd200c410a9: DQN on
CartPole-v1 with prioritized experience replay (50,000 rows, alpha 0.6, beta 0.4), double
Q-learning, the dueling architecture, n-step returns drawn from ``(2, 5)`` and epsilon
falling from 1.0 to 0.02 over 25,000 steps. Every checkpoint holds the buffer, its
priorities (in pages, saved incrementally) and the RNG that draws the n's.

Every line that differs from RLlib's, and why:

* ``from ray.rllib.algorithms.dqn import DQNConfig`` -> ``from cairn.rl.algorithms.dqn import DQNConfig``.
* ``model_config=DefaultModelConfig(fcnet_hiddens=[256], fcnet_activation="tanh",
  fcnet_bias_initializer="zeros_", head_fcnet_hiddens=[256], head_fcnet_bias_initializer="zeros_")``
  -> the same settings as a dict of RLlib's key names: cairn's ``DefaultModelConfig`` takes
  only the fields every default module builds (``fcnet_hiddens``, ``fcnet_activation``),
  while DQN's default module reads these five (``cairn.rl.algorithms.dqn.default_dqn_rl_module``).
* ``lr=0.0005 * (args.num_learners or 1) ** 0.5`` keeps its formula, but ``num_learners``
  is 0 or 1: cairn's prioritized replay takes the TD errors from the one local learner
  (``num_learners > 1`` is refused by name); ``.learners(num_learners=...)`` is the line
  RLlib's script helper adds from ``--num-learners``.
* ``add_rllib_example_script_args`` / ``run_rllib_example_script_experiment`` -> ``main(...)``;
  the stop criteria (return 450, 200,000 timesteps) -> ``iterations``. ``learning_starts``
  (``num_steps_sampled_before_learning_starts``) is an argument so that a CI run of two
  iterations learns; left ``None`` it is DQN's default.
* RLlib draws each row's n from ``(2, 5)`` when the row is sampled (again at every sample);
  cairn draws it once, when the row is added, from the buffer's checkpointed RNG
  (``n_step_transitions`` sums the rewards then). Both draw ``2 <= n < 5``.

Run it::

    python examples/rllib/cartpole_dqn.py
"""

from __future__ import annotations

from typing import Any

from example_output import print_iteration

from cairn.rl.algorithms.dqn import DQNConfig


def main(iterations: int = 2, num_learners: int = 0, learning_starts: int | None = None) -> Any:
    """Train ``iterations`` times; return the last result and the algorithm (stopped)."""
    config = (
        DQNConfig()
        .environment(env="CartPole-v1")
        .training(
            lr=0.0005 * (num_learners or 1) ** 0.5,
            train_batch_size_per_learner=32,
            replay_buffer_config={
                "type": "PrioritizedEpisodeReplayBuffer",
                "capacity": 50_000,
                "alpha": 0.6,
                "beta": 0.4,
            },
            n_step=(2, 5),
            double_q=True,
            dueling=True,
            epsilon=[(0, 1.0), (25_000, 0.02)],
        )
        .rl_module(
            model_config={
                "fcnet_hiddens": [256],
                "fcnet_activation": "tanh",
                "fcnet_bias_initializer": "zeros_",
                "head_fcnet_hiddens": [256],
                "head_fcnet_bias_initializer": "zeros_",
            },
        )
        .learners(num_learners=num_learners)
    )
    if learning_starts is not None:
        config = config.training(num_steps_sampled_before_learning_starts=learning_starts)

    algo = config.build_algo()
    try:
        result: Any = {}
        for _ in range(iterations):
            result = algo.train()
            print_iteration(result)
        return result, algo
    finally:
        algo.stop()


if __name__ == "__main__":
    main(iterations=100)

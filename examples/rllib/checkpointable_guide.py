"""RLlib's ``rllib/examples/checkpoints/checkpointable_guide.py``, ported to cairn.

Ported from ray-project/ray at commit 0a5fbaff7f9aa0b853cafd2f9b2a0bfb34b70b3c: train PPO
on CartPole, save the whole algorithm with ``save_to_path``, build a new algorithm from
the same config, ``restore_from_path`` into it, check the counters came back, train on.
cairn's checkpoint has RLlib's tree (``learner_group/learner/rl_module/default_policy``,
``env_runner``, ``eval_env_runner``), written atomically and verified on every restore, without pickle.

Every line that differs from RLlib's, and why:

* ``from ray.rllib.algorithms.ppo import PPOConfig`` -> ``from cairn.rl.algorithms.ppo import PPOConfig``,
  ``ray.rllib.utils.metrics`` -> ``cairn.rl.utils.metrics`` (the same constants).
* ``from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig`` ->
  ``cairn.rl.core.rl_module.default_model_config``; RLlib's
  ``DefaultModelConfig(fcnet_hiddens=[32], fcnet_activation="linear", vf_share_layers=True)``
  is kept as RLlib writes it (one shared linear encoder under the policy and value heads).
* ``num_env_runners=1`` and ``evaluation_num_env_runners=1`` -> ``main(num_env_runners=...,
  evaluation_num_env_runners=...)``, default 0 (sample and evaluate in this process): remote
  runners need Ray, in cairn as in RLlib; ``1`` gives RLlib's setup.
* ``evaluation_force_reset_envs_before_iteration=True`` -> ``False``: cairn's evaluation
  runners go on with their episodes from one evaluation to the next (their environments
  are checkpointed as the ``eval_env_runner`` component); the builder refuses ``True``.
* ``NUM_ITERS = 5`` -> ``main(iterations=...)``; ``path = "/tmp/ray/rllib_results/..."`` ->
  a folder under ``main(checkpoint_dir=...)`` (default: a temporary folder, removed when ``main`` returns).

Everything else is RLlib's: the metric constants from ``cairn.rl.utils.metrics``,
``evaluate()`` (``eval_results[ENV_RUNNER_RESULTS][EPISODE_RETURN_MEAN]``), ``cleanup()``,
``algo.metrics.peek(key=(ENV_RUNNER_RESULTS, NUM_ENV_STEPS_SAMPLED_LIFETIME))`` and
``algo.iteration``.

Run it::

    python examples/rllib/checkpointable_guide.py
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from cairn.rl.algorithms.ppo import PPOConfig
from cairn.rl.core.rl_module.default_model_config import DefaultModelConfig
from cairn.rl.utils.metrics import (
    ENV_RUNNER_RESULTS,
    EPISODE_RETURN_MEAN,
    NUM_ENV_STEPS_SAMPLED_LIFETIME,
)


def main(
    iterations: int = 2,
    num_env_runners: int = 0,
    evaluation_num_env_runners: int = 0,
    checkpoint_dir: str | None = None,
) -> dict[str, Any]:
    """Run the guide; return what it compared (the two algorithms' counters), the evaluation and the checkpoint."""
    NUM_ITERS = iterations
    # cairn: a temporary folder only without checkpoint_dir, removed before main returns
    scratch = None if checkpoint_dir else tempfile.TemporaryDirectory(prefix="cairn_checkpointable_guide_")
    root = Path(checkpoint_dir or scratch.name)

    base_config = (
        PPOConfig()
        .environment(
            env="CartPole-v1",
        )
        .env_runners(
            num_env_runners=num_env_runners,
            num_envs_per_env_runner=16,
        )
        .evaluation(
            evaluation_num_env_runners=evaluation_num_env_runners,
            evaluation_interval=1,
            evaluation_duration_unit="episodes",
            evaluation_duration=10,
            evaluation_parallel_to_training=False,
            evaluation_force_reset_envs_before_iteration=False,
        )
        .learners(
            num_learners=1,
        )
        .training(
            lr=0.0003,
            vf_loss_coeff=0.01,
            train_batch_size_per_learner=128,
        )
        .rl_module(
            model_config=DefaultModelConfig(
                fcnet_hiddens=[32],
                fcnet_activation="linear",
                vf_share_layers=True,
            ),
        )
    )

    # Build the algorithm
    base_ppo_algo = base_config.build_algo()

    # train for NUM_ITERS iterations
    results: dict[str, Any] = {}
    for _ in range(NUM_ITERS):
        results = base_ppo_algo.train()

    # evaluate
    eval_results = base_ppo_algo.evaluate()
    mean_return = eval_results[ENV_RUNNER_RESULTS][EPISODE_RETURN_MEAN]

    ###############################################
    # Save and restore the entire algorithm state #
    ###############################################

    # Save a checkpoint
    path = str(root / f"iter_{str(NUM_ITERS).zfill(3)}_mean_return_{mean_return:.2f}")
    checkpoint_path = base_ppo_algo.save_to_path(path=path)

    # Release resources claimed by the base_ppo_algo
    base_ppo_algo.cleanup()

    # Create a new algorithm instance (reusing the same base_config),
    # and restore its state from the checkpoint.
    new_base_ppo_algo = base_config.build_algo()
    try:
        new_base_ppo_algo.restore_from_path(path=checkpoint_path)

        # check if the algorithm is restored correctly
        base_num_env_steps_samples_lifetime = base_ppo_algo.metrics.peek(
            key=(ENV_RUNNER_RESULTS, NUM_ENV_STEPS_SAMPLED_LIFETIME)
        )
        new_num_env_steps_samples_lifetime = new_base_ppo_algo.metrics.peek(
            key=(ENV_RUNNER_RESULTS, NUM_ENV_STEPS_SAMPLED_LIFETIME)
        )
        base_iter = base_ppo_algo.iteration
        new_iter = new_base_ppo_algo.iteration

        assert base_num_env_steps_samples_lifetime == new_num_env_steps_samples_lifetime
        assert base_iter == new_iter

        # Continue training the restored algorithm for NUM_ITERS iterations
        for _ in range(NUM_ITERS):
            results = new_base_ppo_algo.train()
    finally:
        new_base_ppo_algo.cleanup()
    if scratch is not None:
        scratch.cleanup()
    return {
        "checkpoint_path": str(checkpoint_path),
        "restored_iteration": new_iter,
        "restored_env_steps": new_num_env_steps_samples_lifetime,
        "saved_env_steps": base_num_env_steps_samples_lifetime,
        "eval_results": eval_results,
        "last_result": results,
    }


if __name__ == "__main__":
    out = main()
    evaluation = out["eval_results"]["env_runners"]["episode_return_mean"]
    steps = f"{out['restored_env_steps']} env steps (saved: {out['saved_env_steps']})"
    print(f"restored at iteration {out['restored_iteration']}, {steps}")
    print(f"evaluation return {evaluation:.2f}")

"""RLlib's ``rllib/examples/checkpoints/change_config_during_training.py``, ported to cairn.

Ported from ray-project/ray at commit 18c2359ecaaba09e75b983405ce805bcda77fa35: train with
a first config and checkpoint every iteration; restore the best checkpoint into a new
algorithm and check it; then change the config considerably (learning rate, batch size,
gradient clipping, ...) and go on training from the checkpoint with the second config,
restored by an ``on_algorithm_init`` callback.

Every line that differs from RLlib's, and why:

* Imports: ``PPOConfig`` from ``cairn.rl.algorithms.ppo``, ``AlgorithmConfig`` from
  ``cairn.rl.algorithms.algorithm_config`` (also ``DEFAULT_MODULE_ID``; RLlib:
  ``ray.rllib.core``), ``MultiAgentCartPole`` from ``cairn.rl.examples.envs.classes.multi_agent``,
  ``register_env`` from ``cairn.rl.env.multi_agent_env``. ``ENV_RUNNER_RESULTS``/``EPISODE_RETURN_MEAN``/
  ``LEARNER_RESULTS``: cairn has no such constants; its flat result keys are written out.
  ``convert_to_numpy``/``check`` (RLlib's test utils) -> ``tensor.detach().numpy()`` and numpy.
* ``policies={f"p{aid}": PolicySpec(config=AlgorithmConfig.overrides(lr=...))}`` ->
  ``policies={...ids...}`` plus ``algorithm_config_overrides_per_module={f"p{aid}":
  AlgorithmConfig.overrides(lr=...)}``: cairn has no ``PolicySpec`` (RLlib's old stack);
  per-module settings are RLlib's new-stack setting, with the same ``overrides()``.
* ``policy_mapping_fn=lambda aid, *a, **kw: f"p{aid}"`` as RLlib writes it (issue 39).
* ``.training(lr=0.0001)`` -> ``.training(lr=0.0001, lr_anneal_timesteps=None)``: cairn's
  default anneals the learning rate to 0 (CleanRL's), RLlib's keeps it; the last check
  (the learner trains with the second config's lr) needs it constant.
* ``run_rllib_example_script_experiment(..., stop={return: --stop-reward-first-config})`` with
  ``checkpoint_freq=1`` (a Tune run) -> ``iterations`` calls of ``train()``, each followed
  by ``save_to_path``; the best checkpoint is the one of the highest ``env_runners/episode_return_mean``
  (Tune's ``get_best_result(metric, mode="max")``). The reward thresholds are dropped from
  the checks (a CI-sized run does not reach them); every check of state stays.
* ``test_algo.evaluate()`` and its check dropped: cairn has no evaluation env runners.
* ``.callbacks(on_algorithm_init=on_algorithm_init)``, a closure over the checkpoint path, as
  RLlib writes it (issue 39: it runs in this program; a checkpoint records only that it existed).
* ``get_module("p0")`` in that hook -> ``get_module(module_id)``: RLlib's script asks for
  ``"p0"`` but checks ``DEFAULT_MODULE_ID`` at the end, which cannot both exist; the hook
  takes ``"p0"`` with agents and ``DEFAULT_MODULE_ID`` without, and the last check runs
  without agents (RLlib's default ``--num-agents=0``), where it can hold.
* ``.learners(num_learners=2)`` and ``.env_runners(num_env_runners=3, num_envs_per_env_runner=5)``
  -> ``main(num_learners=..., num_env_runners=...)`` (defaults 0, this process; RLlib's
  values need Ray, in cairn as in RLlib), ``num_envs_per_env_runner=5`` stays.
* ``train_batch_size=5000`` -> ``main(train_batch_size=...)``, default 5000 (the test runs 500).
* The second Tune run -> ``iterations`` calls of ``train()``; its first result is checked.
* ``tuner_results[0].metrics[LEARNER_RESULTS][DEFAULT_MODULE_ID]["default_optimizer_learning_rate"]``
  -> ``result[f"learners/{DEFAULT_MODULE_ID}/lr"]`` (cairn's name of that metric).

Run it::

    python examples/rllib/change_config_during_training.py
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from cairn.rl.algorithms.algorithm_config import DEFAULT_MODULE_ID, AlgorithmConfig
from cairn.rl.algorithms.ppo import PPOConfig
from cairn.rl.env.multi_agent_env import register_env
from cairn.rl.examples.envs.classes.multi_agent import MultiAgentCartPole


def main(
    iterations: int = 2,
    num_agents: int = 0,
    num_learners: int = 0,
    num_env_runners: int = 0,
    train_batch_size: int = 5000,
    checkpoint_dir: str | None = None,
) -> dict[str, Any]:
    """Run both phases; return the best checkpoint's path and the second config's first result."""
    # cairn: a temporary folder only without checkpoint_dir, removed before main returns
    scratch = None if checkpoint_dir else tempfile.TemporaryDirectory(prefix="cairn_change_config_")
    root = Path(checkpoint_dir or scratch.name)
    register_env("ma_cart", lambda cfg: MultiAgentCartPole({"num_agents": num_agents}))

    # Simple generic config.
    base_config = (
        PPOConfig()
        .environment("CartPole-v1" if num_agents == 0 else "ma_cart")
        .training(lr=0.0001, lr_anneal_timesteps=None)
    )

    # Setup multi-agent, if required.
    if num_agents > 0:
        base_config.multi_agent(
            policies={f"p{aid}" for aid in range(num_agents)},
            algorithm_config_overrides_per_module={
                f"p{aid}": AlgorithmConfig.overrides(
                    lr=5e-5 * (aid + 1),  # agent 1 has double the learning rate as 0.
                )
                for aid in range(num_agents)
            },
            policy_mapping_fn=lambda aid, *a, **kw: f"p{aid}",
        )

    # The first run: checkpoint every iteration (Tune's checkpoint_freq=1).
    metric = "env_runners/episode_return_mean"
    algo = base_config.build_algo()
    checkpoints: list[tuple[float, str]] = []
    try:
        for _ in range(iterations):
            result = algo.train()
            path = algo.save_to_path(str(root / f"iter_{result['training_iteration']:03d}"))
            checkpoints.append((float(np.nan_to_num(result[metric], nan=-np.inf)), str(path)))
    finally:
        algo.stop()

    # - Extract the best checkpoint.
    best_checkpoint_path = max(checkpoints, key=lambda c: c[0])[1]

    # Rebuild the algorithm (just for testing purposes).
    test_algo = base_config.build()
    try:
        # Load algo's state from the best checkpoint.
        test_algo.restore_from_path(best_checkpoint_path)
        # Perform some checks on the restored state.
        assert test_algo.training_iteration > 0
        # Train one iteration to make sure, the performance does not collapse (e.g. due
        # to the optimizer weights not having been restored properly).
        test_algo.train()
    finally:
        # Stop the test algorithm again.
        test_algo.stop()

    # Make sure the algorithm gets restored from a checkpoint right after
    # initialization. Note that this includes all subcomponents of the algorithm,
    # including the optimizer states in the LearnerGroup/Learner actors.
    module_id = "p0" if num_agents > 0 else DEFAULT_MODULE_ID

    def on_algorithm_init(algorithm: Any, **kwargs: Any) -> None:
        module_p0 = algorithm.get_module(module_id)
        weight_before = next(iter(module_p0.parameters())).detach().numpy().copy()

        algorithm.restore_from_path(best_checkpoint_path)

        # Make sure weights were restored (changed).
        weight_after = next(iter(module_p0.parameters())).detach().numpy()
        assert not np.array_equal(weight_before, weight_after)

    # Change the config.
    (
        base_config
        # Make sure the algorithm gets restored upon initialization.
        .callbacks(on_algorithm_init=on_algorithm_init)
        # Change training parameters considerably.
        .training(
            lr=0.0003,
            train_batch_size=train_batch_size,
            grad_clip=100.0,
            gamma=0.996,
            num_epochs=6,
            vf_loss_coeff=0.01,
        )
        # Make multi-CPU/GPU.
        .learners(num_learners=num_learners)
        # Use more env runners and more envs per env runner.
        .env_runners(num_env_runners=num_env_runners, num_envs_per_env_runner=5)
    )

    # Run a new experiment with the (RLlib) callback `on_algorithm_init` restoring
    # from the best checkpoint.
    algo = base_config.build_algo()
    try:
        first_result: dict[str, Any] = {}
        for _ in range(iterations):
            result = algo.train()
            first_result = first_result or result
    finally:
        algo.stop()

    # Assert that we have continued training with a different learning rate.
    if num_agents == 0:
        assert first_result[f"learners/{DEFAULT_MODULE_ID}/lr"] == base_config.lr == 0.0003
    if scratch is not None:
        scratch.cleanup()
    return {"best_checkpoint_path": best_checkpoint_path, "first_result": first_result}


if __name__ == "__main__":
    main()

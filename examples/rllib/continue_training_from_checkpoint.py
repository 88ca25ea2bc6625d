"""RLlib's ``rllib/examples/checkpoints/continue_training_from_checkpoint.py``, ported to cairn.

Ported from ray-project/ray at commit 0ba68feac5cd9d6612a8ae8694f9ae1359e15bb6: train with
a checkpoint every iteration until a callback makes the algorithm crash; restore the
best checkpoint into a new algorithm (without the crashing callback) and check it;
then continue the experiment exactly where it left off.

Every line that differs from RLlib's, and why:

* Imports: ``DefaultCallbacks`` -> ``RLlibCallback`` (``cairn.rl.callbacks.callbacks``; RLlib's
  new name), ``AlgorithmConfig`` from ``cairn.rl.algorithms.algorithm_config``,
  ``MultiAgentCartPole`` from ``cairn.rl.examples.envs.classes.multi_agent``, ``register_env``
  from ``cairn.rl.env.multi_agent_env``. Tune (``tune.Tuner``, ``train.RunConfig``,
  ``CheckpointConfig``), WandB and ``check_learning_achieved`` are gone: cairn is not a
  tuner. ``ENV_RUNNER_RESULTS``/``EPISODE_RETURN_MEAN`` from ``cairn.rl.utils.metrics``
  (RLlib's constants, the same nested result).
* ``get_trainable_cls(args.algo).get_default_config()`` -> ``PPOConfig()``.
* ``.api_stack(enable_rl_module_and_learner=..., enable_env_runner_and_connector_v2=...)`` ->
  ``True`` for both (cairn has only the new stack; the builder refuses ``False``).
* ``.env_runners(create_env_on_local_worker=True)`` dropped: cairn always has a local env
  runner with environments (the builder accepts only RLlib's default, ``False``).
* ``CrashAfterNIters`` reads the trigger from a class attribute (RLlib: the script's global
  ``args``); cairn builds callbacks without arguments and records them by class.
* ``policies={f"p{aid}": PolicySpec(config=AlgorithmConfig.overrides(lr=...))}`` -> ids plus
  ``algorithm_config_overrides_per_module`` (cairn has no ``PolicySpec``, RLlib's old stack);
  ``policy_mapping_fn=lambda ...`` as RLlib writes it (issue 39).
* The Tune run with ``checkpoint_frequency=1`` -> ``train()`` then ``save_to_path`` per
  iteration until the callback raises; the best checkpoint is the one of the highest
  ``env_runners/episode_return_mean``. Reward thresholds are dropped from the checks (a CI-sized run
  does not reach them); the crash is triggered by ``crash_after_iterations`` instead.
* ``test_algo.restore(best_result.checkpoint)`` -> ``test_algo.restore(best_checkpoint_path)``
  (a path: there is no Tune result). ``test_algo.evaluate()`` needs evaluation runners in
  cairn (RLlib falls back on the training env runner, whose state it then changes), so the
  test algorithm's config adds ``evaluation(evaluation_num_env_runners=0,
  evaluation_interval=1, evaluation_duration=...)``; the evaluation's return threshold is
  dropped like the others.
* ``tune.Tuner.restore(path, resume_errored=True).fit()`` -> ``Algorithm.from_checkpoint`` of
  the last checkpoint, then ``train()``: the experiment continues where it left off
  (cairn restores the iteration, the counters, the optimizer and the RNGs); the
  continued algorithm is built with the config without the crashing callback (as RLlib's
  test algorithm is), because the checkpoint records the config it was saved with.
* ``time.sleep(20)`` for WandB dropped.

Run it::

    python examples/rllib/continue_training_from_checkpoint.py
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

import cairn
from cairn.rl.algorithms.algorithm import Algorithm
from cairn.rl.algorithms.algorithm_config import AlgorithmConfig
from cairn.rl.algorithms.ppo import PPOConfig
from cairn.rl.callbacks.callbacks import RLlibCallback
from cairn.rl.env.multi_agent_env import register_env
from cairn.rl.examples.envs.classes.multi_agent import MultiAgentCartPole
from cairn.rl.utils.metrics import ENV_RUNNER_RESULTS, EPISODE_RETURN_MEAN


@cairn.register
class CrashAfterNIters(RLlibCallback):
    """Callback that makes the algo crash after a certain avg. return is reached."""

    crash_after_iterations: ClassVar[int] = 2
    """cairn: the trigger (RLlib: ``--stop-reward-crash``, a return a CI-sized run does not reach)."""

    def __init__(self) -> None:
        super().__init__()
        # We have to delay crashing by one iteration just so the checkpoint still
        # gets created after(!) we have reached the trigger.
        self._should_crash = False

    def on_train_result(self, *, algorithm: Any, metrics_logger: Any, result: dict[str, Any], **kwargs: Any) -> None:
        """Crash one iteration after the trigger."""
        if self._should_crash:
            raise RuntimeError("Intended crash after reaching trigger return.")
        # Reached crashing criterion, crash on next iteration.
        elif result["training_iteration"] >= self.crash_after_iterations:
            print(f"Reached trigger at return {result[ENV_RUNNER_RESULTS][EPISODE_RETURN_MEAN]}")
            self._should_crash = True


def main(
    iterations: int = 2,
    num_agents: int = 0,
    continue_iterations: int = 1,
    evaluation_episodes: int = 2,
    checkpoint_dir: str | None = None,
) -> dict[str, Any]:
    """Crash after ``iterations``, check the best checkpoint, continue; return what the test checks."""
    # cairn: a temporary folder only without checkpoint_dir, removed before main returns
    scratch = None if checkpoint_dir else tempfile.TemporaryDirectory(prefix="cairn_continue_training_")
    root = Path(checkpoint_dir or scratch.name)
    CrashAfterNIters.crash_after_iterations = iterations
    register_env("ma_cart", lambda cfg: MultiAgentCartPole({"num_agents": num_agents}))

    # Simple generic config.
    config = (
        PPOConfig()
        .api_stack(
            enable_rl_module_and_learner=True,
            enable_env_runner_and_connector_v2=True,
        )
        .environment("CartPole-v1" if num_agents == 0 else "ma_cart")
        .training(lr=0.0001)
        .callbacks(CrashAfterNIters)
    )

    # Setup multi-agent, if required.
    if num_agents > 0:
        config.multi_agent(
            policies={f"p{aid}" for aid in range(num_agents)},
            algorithm_config_overrides_per_module={
                f"p{aid}": AlgorithmConfig.overrides(
                    lr=5e-5 * (aid + 1),  # agent 1 has double the learning rate as 0.
                )
                for aid in range(num_agents)
            },
            policy_mapping_fn=lambda aid, *a, **kw: f"p{aid}",
        )

    # Run some iterations and generate checkpoints (Tune: checkpoint_frequency=1).
    metric = f"{ENV_RUNNER_RESULTS}/{EPISODE_RETURN_MEAN}"
    checkpoints: list[tuple[float, str]] = []
    crashed_at: dict[str, Any] = {}
    algo = config.build_algo()
    try:
        while True:
            result = algo.train()
            path = str(algo.save_to_path(str(root / f"iter_{result['training_iteration']:03d}")))
            checkpoints.append((float(np.nan_to_num(result[metric], nan=-np.inf)), path))
            module = algo.get_module("p0" if num_agents else "default_policy")
            crashed_at = {"iteration": algo.training_iteration, "weights": module.get_state()}  # a copy
    except RuntimeError as crash:
        print(f"The experiment crashed: {crash}")
    finally:
        algo.stop()

    # - Extract the best checkpoint.
    best_checkpoint_path = max(checkpoints, key=lambda c: c[0])[1]
    # - Change our config, such that the restored algo won't crash anymore (remove the
    #   crashing callback).
    config.callbacks(None)
    # Rebuild the algorithm (just for testing purposes), with evaluation runners (cairn).
    test_config = config.copy().evaluation(
        evaluation_num_env_runners=0, evaluation_interval=1, evaluation_duration=evaluation_episodes
    )
    test_algo = test_config.build()
    try:
        # Load algo's state from best checkpoint.
        test_algo.restore(best_checkpoint_path)
        # Perform some checks on the restored state.
        assert test_algo.training_iteration > 0
        # Evaluate on the restored algorithm.
        test_eval_results = test_algo.evaluate()
        print(f"Evaluation of the restored algorithm: {test_eval_results[ENV_RUNNER_RESULTS][EPISODE_RETURN_MEAN]}")
        # Train one iteration to make sure, the performance does not collapse (e.g. due
        # to the optimizer weights not having been restored properly).
        test_algo.train()
    finally:
        # Stop the test algorithm again.
        test_algo.stop()

    # Continue the experiment exactly where we left off: the last checkpoint (the crashed
    # iteration's was never written), without the crashing callback.
    last_checkpoint_path = checkpoints[-1][1]
    restored = Algorithm.from_checkpoint(last_checkpoint_path, config=config)
    try:
        resumed_at = restored.training_iteration
        resumed_weights = restored.get_module("p0" if num_agents else "default_policy").get_state()
        for _ in range(continue_iterations):
            result = restored.train()
    finally:
        restored.stop()
    if scratch is not None:
        scratch.cleanup()
    return {
        "crashed_at": crashed_at,
        "resumed_at": resumed_at,
        "resumed_weights": resumed_weights,
        "best_checkpoint_path": best_checkpoint_path,
        "test_eval_results": test_eval_results,
        "last_result": result,
    }


if __name__ == "__main__":
    import continue_training_from_checkpoint as example  # run the module, not __main__ (callbacks by reference)

    example.main()

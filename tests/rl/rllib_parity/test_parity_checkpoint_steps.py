"""RLlib's ``rllib/algorithms/tests/test_algorithm_checkpoint_steps.py``, translated to cairn.

Lifetime metrics, a built-in one and a callback's custom one, continue
exactly across checkpoints, also across a checkpoint of a restored algorithm.
Differs: RLlib compares 0 env runners with 5 remote ones; here one local
runner (lifetime metrics of remote runners resuming exactly:
``tests/distributed/test_dist_resume.py`` and ``test_dist_callbacks.py``).
RLlib's ``result[ENV_RUNNER_RESULTS][m]`` is cairn's ``result[m]`` for the
built-in counter and ``result["env_runners/" + m]`` for what env runners log.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from parity_callbacks import NUM_ENV_STEPS_IN_CALLBACK_LIFETIME, CountEnvSteps
from parity_helpers import tiny_config

from cairn.rl import PPO

ENV_STEPS_PER_ITERATION = 2 * 16  # num_envs_per_env_runner x rollout_length of tiny_config


def peek_built_in(algo: PPO) -> Any:
    """The algorithm's lifetime env steps without training (RLlib: ``algo.metrics.peek``)."""
    return algo.env_runner_group.get_metrics()["num_env_steps_sampled_lifetime"]


def peek_custom(algo: PPO) -> Any:
    """The callback's lifetime sum in the algorithm's metrics logger."""
    return algo.metrics.peek(f"env_runners/{NUM_ENV_STEPS_IN_CALLBACK_LIFETIME}")


METRICS: dict[str, tuple[str, Callable[[PPO], Any]]] = {
    "num_env_steps_sampled_lifetime": ("num_env_steps_sampled_lifetime", peek_built_in),
    NUM_ENV_STEPS_IN_CALLBACK_LIFETIME: (f"env_runners/{NUM_ENV_STEPS_IN_CALLBACK_LIFETIME}", peek_custom),
}
"""RLlib's metric name -> (its key in a cairn ``train()`` result, how to read it without training)."""


@pytest.mark.parametrize("metric", list(METRICS))
def test_metrics_after_checkpoint(metric: str, tmp_path: Path) -> None:
    """``test_algorithm_checkpoint_steps.py::TestAlgorithmCheckpointStepsAfterRestore::test_metrics_after_checkpoint``.

    Train 3 steps, saving after steps 1 and 2; the metric is 1, 2, 3 times the
    steps of one iteration. Restored from step 1 it reads step 1's value, and
    the next step gives step 2's; saved again and restored, it reads step 2's
    value and the next step gives step 3's; so does the restored-once
    algorithm's step 3. RLlib's custom metric is logged ``on_sample_end``
    (``CountEnvSteps``, recorded by reference in the config).
    """
    key, peek = METRICS[metric]
    algo = PPO(tiny_config(seed=11, callbacks_class=CountEnvSteps))

    def step(algo: PPO) -> Any:
        result = algo.train()
        assert result[key] == result["training_iteration"] * ENV_STEPS_PER_ITERATION
        return result[key]

    step(algo)
    checkpoint_step1 = algo.save_to_path(tmp_path / "step1")
    value_step2 = step(algo)
    algo.save_to_path(tmp_path / "step2")
    value_step3 = step(algo)
    algo.stop()

    restored = PPO.from_checkpoint(checkpoint_step1)
    assert peek(restored) == ENV_STEPS_PER_ITERATION
    assert step(restored) == value_step2
    checkpoint_step2_restored = restored.save_to_path(tmp_path / "step2_restored")
    assert step(restored) == value_step3
    restored.stop()

    restored_x2 = PPO.from_checkpoint(checkpoint_step2_restored)
    assert peek(restored_x2) == value_step2
    assert step(restored_x2) == value_step3
    restored_x2.stop()

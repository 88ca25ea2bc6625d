"""RLlib's ``AssertEvalCallback`` (``ray.rllib.examples.evaluation.evaluation_parallel_to_training``).

RLlib's script of that name trains with evaluation running next to training; its
callback, which RLlib's ``test_algorithm.py`` uses, checks after every iteration that an
evaluation ran exactly as long as configured. Only the callback is here: cairn runs an
evaluation between training steps (docs/rl.md, Evaluation), so the script's point
(overlapping the two) does not apply.
"""

from __future__ import annotations

from typing import Any

from cairn.rl.callbacks.callbacks import RLlibCallback
from cairn.rl.utils.metrics.constants import (
    ENV_RUNNER_RESULTS,
    EVALUATION_RESULTS,
    NUM_ENV_STEPS_SAMPLED,
    NUM_EPISODES,
)

__all__ = ["AssertEvalCallback"]

TIMESTEPS_TOLERANCE = 20
"""How far (in env steps) an evaluation counted in timesteps may be from ``evaluation_duration`` (RLlib's)."""


class AssertEvalCallback(RLlibCallback):
    """Asserts, after every ``train()``, that its evaluation ran for exactly ``evaluation_duration``.

    Counted in episodes: exactly that many episodes; in timesteps: within
    :data:`TIMESTEPS_TOLERANCE` steps of it. With ``always_attach_evaluation_results``
    every result must carry evaluation results.

    Raises:
        AssertionError: An evaluation ran longer or shorter than configured.
        KeyError: ``always_attach_evaluation_results`` is set and a result has none.
    """

    def on_train_result(self, *, algorithm: Any, result: dict[str, Any], **kwargs: Any) -> None:
        """Check the evaluation results of ``result`` against ``algorithm.config``."""
        config = algorithm.config
        runner_results = result.get(EVALUATION_RESULTS, {}).get(ENV_RUNNER_RESULTS)
        if runner_results and NUM_EPISODES in runner_results:
            episodes = runner_results[NUM_EPISODES]
            if config.evaluation_duration_unit == "episodes":
                assert episodes == config.evaluation_duration, (episodes, config.evaluation_duration)
            else:
                steps = runner_results.get(NUM_ENV_STEPS_SAMPLED, 0)
                delta = config.evaluation_duration - steps
                assert abs(delta) < TIMESTEPS_TOLERANCE, (delta, config.evaluation_duration, steps)
        elif config.always_attach_evaluation_results and not runner_results:
            raise KeyError(f"result[{EVALUATION_RESULTS!r}][{ENV_RUNNER_RESULTS!r}] is missing from a train() result.")

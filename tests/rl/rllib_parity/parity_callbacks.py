"""A user's callbacks for the parity tests, recorded in checkpoints by reference (``parity_callbacks:Class``)."""

from __future__ import annotations

from typing import Any

from cairn.rl import RLlibCallback
from cairn.rl.utils.metrics.metrics_logger import MetricsLogger

NUM_ENV_STEPS_IN_CALLBACK_LIFETIME = "num_env_steps_in_callback"
"""The custom lifetime metric :class:`CountEnvSteps` logs (RLlib's test's name)."""


class CountEnvSteps(RLlibCallback):
    """Counts the env steps of every ``sample()`` in a custom lifetime sum, as RLlib's test does.

    RLlib's callback logs ``metrics_logger.peek(NUM_ENV_STEPS_SAMPLED)``; cairn's env
    runner logger holds no such counter, so the steps are counted in ``samples``
    (module id -> time-major batch, one column per sub-environment).
    """

    def on_sample_end(self, *, metrics_logger: MetricsLogger, samples: Any, **kwargs: Any) -> None:
        steps = sum(int(batch["rewards"].size) for batch in samples.values())
        metrics_logger.log_value(NUM_ENV_STEPS_IN_CALLBACK_LIFETIME, steps, reduce="sum", clear_on_reduce=False)

"""A user's callbacks for the parity tests, recorded in checkpoints by reference (``parity_callbacks:Class``)."""

from __future__ import annotations

from typing import Any

from cairn.rl import RLlibCallback
from cairn.rl.env.env_runner import NUM_ENV_STEPS_SAMPLED
from cairn.rl.utils.metrics.metrics_logger import MetricsLogger

NUM_ENV_STEPS_IN_CALLBACK_LIFETIME = "num_env_steps_in_callback"
"""The custom lifetime metric :class:`CountEnvSteps` logs (RLlib's test's name)."""


class CountEnvSteps(RLlibCallback):
    """Counts the env steps of every ``sample()`` in a custom lifetime sum, as RLlib's test does:
    the env runner has logged ``num_env_steps_sampled`` before ``on_sample_end`` runs."""

    def on_sample_end(self, *, metrics_logger: MetricsLogger, samples: Any, **kwargs: Any) -> None:
        steps = metrics_logger.peek(NUM_ENV_STEPS_SAMPLED)
        metrics_logger.log_value(NUM_ENV_STEPS_IN_CALLBACK_LIFETIME, steps, reduce="sum", clear_on_reduce=False)

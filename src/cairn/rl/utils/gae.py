"""Generalized advantage estimation (Schulman et al., 2016), time-major numpy.

Episode ends inside a rollout are handled the usual way: a terminated step
has no future value; a truncated step (time limit) bootstraps from the value
of its final observation, which the env runner computed before the sub
environment was reset.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

__all__ = ["compute_gae"]

FloatArray = npt.NDArray[np.floating]
BoolArray = npt.NDArray[np.bool_]


def compute_gae(
    rewards: FloatArray,
    values: FloatArray,
    terminateds: BoolArray,
    truncateds: BoolArray,
    final_values: FloatArray,
    last_values: FloatArray,
    *,
    gamma: float,
    gae_lambda: float,
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """Advantages and value targets for a time-major rollout.

    Args:
        rewards: ``[T, N]`` rewards of step ``t`` in sub-environment ``n``.
        values: ``[T, N]`` value estimates of the observations acted on.
        terminateds: ``[T, N]`` whether the episode terminated at step ``t``.
        truncateds: ``[T, N]`` whether the episode was cut (time limit) at step ``t``.
        final_values: ``[T, N]`` value of the final observation where a step was
            truncated and not terminated; ignored elsewhere.
        last_values: ``[N]`` value of the observations after the last step.
        gamma: Discount factor.
        gae_lambda: GAE's lambda.

    Returns:
        ``(advantages, value_targets)``, both ``[T, N]`` float64, where
        ``value_targets = advantages + values``.
    """
    rewards64 = np.asarray(rewards, dtype=np.float64)
    values64 = np.asarray(values, dtype=np.float64)
    term = np.asarray(terminateds, dtype=np.bool_)
    trunc = np.asarray(truncateds, dtype=np.bool_)
    horizon = rewards64.shape[0]
    if values64.shape != rewards64.shape or term.shape != rewards64.shape:
        raise ValueError(
            f"compute_gae: rewards {rewards64.shape}, values {values64.shape} and "
            f"terminateds {term.shape} must have the same [T, N] shape."
        )
    done = term | trunc
    bootstrap = np.where(trunc & ~term, np.asarray(final_values, dtype=np.float64), 0.0)
    advantages = np.zeros_like(rewards64)
    last_gae = np.zeros(rewards64.shape[1:], dtype=np.float64)
    for t in reversed(range(horizon)):
        next_values = np.asarray(last_values, dtype=np.float64) if t == horizon - 1 else values64[t + 1]
        next_values = np.where(done[t], bootstrap[t], next_values)
        delta = rewards64[t] + gamma * next_values - values64[t]
        last_gae = delta + gamma * gae_lambda * np.where(done[t], 0.0, last_gae)
        advantages[t] = last_gae
    return advantages, advantages + values64

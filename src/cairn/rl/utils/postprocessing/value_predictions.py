"""RLlib's ``extract_bootstrapped_values``: the value each T-long slice of episodes bootstraps from.

RLlib's learners compute value predictions over episodes made one step longer at
their end (the extra step holds the value of the final observation, or 0 where the
episode terminated). Cut the episodes' real steps, back to back, into slices of
``T``: each slice bootstraps from the prediction just after its last real step,
which is the next step of the same episode or that episode's extra step. cairn's own
GAE (:mod:`cairn.rl.utils.gae`) works time-major and needs none of this; the helper
is here at RLlib's path for code written against RLlib.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["extract_bootstrapped_values"]


def extract_bootstrapped_values(
    vf_preds: Sequence[Any], episode_lengths: Sequence[int], T: int
) -> np.ndarray[Any, Any]:
    """The bootstrap value of every ``T``-long slice of the episodes' steps (RLlib's).

    Args:
        vf_preds: The predictions over the episodes, each made one step longer at its
            end (``sum(episode_lengths) + len(episode_lengths)`` of them).
        episode_lengths: The episodes' real lengths (without the extra step).
        T: The slice length; ``sum(episode_lengths)`` must be a multiple of it.

    Returns:
        ``sum(episode_lengths) // T`` values, the prediction after each slice's last step.

    Raises:
        ValueError: ``T`` is not positive, a length is negative, the steps do not
            split into slices of ``T``, or there are fewer predictions than the
            elongated episodes hold.
    """
    lengths = [int(n) for n in episode_lengths]
    if T <= 0 or any(n < 0 for n in lengths):
        raise ValueError(f"extract_bootstrapped_values: T ({T}) must be > 0 and the episode lengths >= 0: {lengths}.")
    total = sum(lengths)
    if total % T != 0:
        raise ValueError(
            f"extract_bootstrapped_values: the episodes' {total} steps do not split into slices of T={T}; "
            "give lengths whose sum is a multiple of T."
        )
    if len(vf_preds) < total + len(lengths):
        raise ValueError(
            f"extract_bootstrapped_values: {len(vf_preds)} predictions for {len(lengths)} episodes of "
            f"{total} steps; each episode needs its steps and one more ({total + len(lengths)} in all)."
        )
    picked: list[Any] = []
    # ``steps_before`` counts the real steps of earlier episodes, ``start`` is the
    # episode's first prediction (each earlier episode holds one extra step).
    steps_before = 0
    start = 0
    for length in lengths:
        # Slices end at the real steps whose global index + 1 is a multiple of T.
        first_end = -(-(steps_before + 1) // T) * T  # smallest multiple of T > steps_before
        for end in range(first_end, steps_before + length + 1, T):
            # The slice's last step is step ``end - 1 - steps_before`` of this
            # episode; the prediction after it is the next one (the extra step at
            # the episode's end).
            picked.append(vf_preds[start + end - steps_before])
        steps_before += length
        start += length + 1
    return np.array(picked)

"""cairn.rl.utils.postprocessing.value_predictions: RLlib's extract_bootstrapped_values and its refusals."""

from __future__ import annotations

import numpy as np
import pytest

from cairn.rl.utils.postprocessing.value_predictions import extract_bootstrapped_values


def test_each_slice_bootstraps_from_the_prediction_after_its_last_step() -> None:
    # Two episodes of 3 and 1 steps, each one step longer: predictions 0..2 (+10), 20 (+30).
    preds = [0.0, 1.0, 2.0, 10.0, 20.0, 30.0]
    # T=2: slice 1 = steps 0, 1 of episode 0 -> its step 2; slice 2 = step 2 of episode 0
    # and step 0 of episode 1 -> episode 1's extra step.
    np.testing.assert_array_equal(extract_bootstrapped_values(preds, [3, 1], 2), [2.0, 30.0])
    # T=4: one slice over both episodes.
    np.testing.assert_array_equal(extract_bootstrapped_values(preds, [3, 1], 4), [30.0])
    # T=1: every step bootstraps from the next prediction of its episode.
    np.testing.assert_array_equal(extract_bootstrapped_values(preds, [3, 1], 1), [1.0, 2.0, 10.0, 30.0])


@pytest.mark.parametrize(
    ("preds", "lengths", "T", "match"),
    [
        ([0.0] * 6, [3, 1], 3, "multiple of T"),
        ([0.0] * 5, [3, 1], 2, "one more"),
        ([0.0] * 6, [3, 1], 0, "must be > 0"),
        ([0.0] * 6, [5, -1], 2, "must be > 0"),
    ],
)
def test_lengths_that_do_not_fit_are_refused(preds: list[float], lengths: list[int], T: int, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        extract_bootstrapped_values(preds, lengths, T)

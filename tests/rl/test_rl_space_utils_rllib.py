"""RLlib's space_utils helpers on cairn: unbatch (batch's inverse, no dm_tree), unsquash, type conversion."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from cairn.rl.utils.spaces.space_utils import (
    batch,
    convert_element_to_space_type,
    get_base_struct_from_space,
    unbatch,
    unsquash_action,
)


def test_unbatch_gives_batchs_items_back() -> None:
    items = [{"a": (np.float32(i), np.array([i, -i])), "b": np.bool_(i % 2)} for i in range(3)]
    rows = unbatch(batch(items))
    assert len(rows) == 3
    for got, want in zip(rows, items, strict=True):
        assert float(got["a"][0]) == float(want["a"][0]) and np.array_equal(got["a"][1], want["a"][1])
        assert bool(got["b"]) is bool(want["b"])
    assert np.array_equal(
        batch([np.zeros(2), np.ones(3)], individual_items_already_have_batch_dim=True), [0, 0, 1, 1, 1]
    )


def test_unsquash_maps_float_boxes_to_bounds_and_leaves_the_rest() -> None:
    space = gym.spaces.Dict(
        {
            "f": gym.spaces.Box(-2.0, 2.0, (2,), np.float32),
            "d": gym.spaces.Discrete(3),
            "u": gym.spaces.Box(-np.inf, np.inf, (1,)),
        }
    )
    out = unsquash_action({"f": np.array([-1.0, 5.0]), "d": 1, "u": np.array([7.0])}, get_base_struct_from_space(space))
    assert np.allclose(out["f"], [-2.0, 2.0]) and out["d"] == 1 and out["u"][0] == 7.0


def test_convert_refuses_other_structures() -> None:
    sample = {"a": np.zeros(2, np.float32), "b": 1}
    with pytest.raises(ValueError, match="keys"):
        convert_element_to_space_type({"a": np.zeros(2)}, sample)
    with pytest.raises(ValueError, match="shape"):
        convert_element_to_space_type({"a": 1.0, "b": 1.0}, sample)
    out = convert_element_to_space_type({"a": np.zeros(2), "b": 1.0}, sample)
    assert out["a"].dtype == np.float32 and out["b"] == 1 and isinstance(out["b"], int)

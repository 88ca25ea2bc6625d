"""cairn's own checks of InfiniteLookbackBuffer and space_utils beyond RLlib's ported tests."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from cairn.rl.env.utils.infinite_lookback_buffer import InfiniteLookbackBuffer
from cairn.rl.utils.spaces.space_utils import batch, get_dummy_batch_for_space, one_hot_for_space


def test_from_state_refuses_missing_keys_and_a_list_that_claims_to_be_finalized() -> None:
    with pytest.raises(ValueError, match="lacks"):
        InfiniteLookbackBuffer.from_state({"data": [1], "lookback": 0})
    with pytest.raises(ValueError, match="finalized=True"):
        InfiniteLookbackBuffer.from_state({"data": [1], "lookback": 0, "finalized": True, "space": None})


def test_one_hot_needs_a_space() -> None:
    with pytest.raises(ValueError, match="space="):
        InfiniteLookbackBuffer(data=[0, 1]).get(0, one_hot_discrete=True)


def test_finalized_buffer_reads_one_hot_and_sets_items_of_a_dict_space() -> None:
    space = gym.spaces.Dict({"a": gym.spaces.Discrete(3), "m": gym.spaces.MultiDiscrete([2, 3])})
    items = [{"a": i, "m": np.array([i % 2, i])} for i in range(3)]
    buffer = InfiniteLookbackBuffer(data=items, lookback=1, space=space)
    buffer.finalize()
    got = buffer.get([0, 5], fill=0, one_hot_discrete=True)
    np.testing.assert_array_equal(got["a"], [[0, 1, 0], [0, 0, 0]])
    np.testing.assert_array_equal(got["m"], [[0, 1, 0, 1, 0], [0, 0, 0, 0, 0]])
    buffer[-1] = {"a": 0, "m": np.array([0, 0])}
    assert buffer.get(-1)["a"] == 0
    buffer.pop(0)
    assert buffer.len_incl_lookback() == 2 and len(buffer) == 1


def test_space_utils_refusals_and_shapes() -> None:
    with pytest.raises(ValueError, match="no items"):
        batch([])
    with pytest.raises(ValueError, match="batch_size=-1"):
        get_dummy_batch_for_space(gym.spaces.Discrete(2), -1)
    assert get_dummy_batch_for_space(gym.spaces.Box(0, 1, (2,)), 3, fill_value=1.0).shape == (3, 2)
    np.testing.assert_array_equal(one_hot_for_space(np.array([1, 0]), gym.spaces.Discrete(2)), [[0, 1], [1, 0]])

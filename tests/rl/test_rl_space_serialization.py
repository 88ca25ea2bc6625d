"""cairn.rl.utils.serialization: RLlib's space dicts read both ways, and what reading refuses."""

from __future__ import annotations

import base64
import io
import json
import zlib

import gymnasium as gym
import numpy as np
import pytest

from cairn.rl.utils.serialization import (
    MAX_ARRAY_BYTES,
    MAX_DEPTH,
    gym_space_from_dict,
    gym_space_to_dict,
    space_from_dict,
    space_to_dict,
)
from cairn.rl.utils.spaces.repeated import Repeated
from cairn.rl.utils.spaces.simplex import Simplex

# Written by RLlib 2.60's space_to_dict (the project's .venv-rllib) for
# Dict(b=Box(-1, 2, (2,), float32), d=Discrete(3, start=1), m=MultiDiscrete([2, 5])).
RLLIB_DICT = json.loads(
    '{"space": {"space": "dict", "spaces": {"b": {"space": "box", "low": "eJyb7BfqGxDJyFDGUK2eklqcXKRupaBuk2airqOgnpZf'
    'VFKUmBefX5SSChJ3S8wpTgWKF2ckFqQC+RpGOpo6CrUKFAAuBoaG/SAMADXmHdc=", "high": "eJyb7BfqGxDJyFDGUK2eklqcXKRupaBuk2ai'
    'rqOgnpZfVFKUmBefX5SSChJ3S8wpTgWKF2ckFqQC+RpGOpo6CrUKFAAuBgYGBxAGAC7sG9k=", "shape": [2], "dtype": "<f4"}, "d": '
    '{"space": "discrete", "n": 3, "start": 1}, "m": {"space": "multi-discrete", "nvec": "eJyb7BfqGxDJyFDGUK2eklqcXKRu'
    'paBuk2mhrqOgnpZfVFKUmBefX5SSChJ3S8wpTgWKF2ckFqQC+RpGOpo6CrUKFAAuJgYIYIXSAAvdG2c=", "dtype": "<i8"}}}}'
)


def test_a_dict_rllib_wrote_reads_and_writes_back_the_same() -> None:
    space = space_from_dict(RLLIB_DICT)
    want = gym.spaces.Dict(
        {
            "b": gym.spaces.Box(-1.0, 2.0, (2,), np.float32),
            "d": gym.spaces.Discrete(3, start=1),
            "m": gym.spaces.MultiDiscrete([2, 5]),
        }
    )
    assert space == want
    assert space_to_dict(space) == RLLIB_DICT


def test_round_trips_of_the_other_kinds() -> None:
    for space in (
        gym.spaces.MultiBinary([2, 3]),
        gym.spaces.Text(max_length=4, min_length=1, charset="xyz"),
        Simplex((2, 3), concentration=np.array([1.0, 2.0, 3.0])),
        Repeated(gym.spaces.Discrete(4), max_len=5),
    ):
        assert gym_space_from_dict(json.loads(json.dumps(gym_space_to_dict(space)))) == space


def _npy(array: np.ndarray) -> str:
    buf = io.BytesIO()
    np.save(buf, array, allow_pickle=True)
    return base64.b64encode(zlib.compress(buf.getvalue())).decode("ascii")


def test_reading_refuses_pickles_bombs_depth_and_unknown_kinds() -> None:
    box = dict(RLLIB_DICT["space"]["spaces"]["b"])
    with pytest.raises(ValueError, match=r"no base64 zlib \.npy array of numbers"):
        gym_space_from_dict({**box, "low": _npy(np.array([object(), 1], dtype=object))})
    bomb = base64.b64encode(zlib.compress(b"\0" * (MAX_ARRAY_BYTES + 1))).decode("ascii")
    with pytest.raises(ValueError, match="decompresses to more than"):
        gym_space_from_dict({**box, "low": bomb})
    nested: dict = {"space": "discrete", "n": 2}
    for _ in range(MAX_DEPTH + 1):
        nested = {"space": "tuple", "spaces": [nested]}
    with pytest.raises(ValueError, match="nested deeper"):
        gym_space_from_dict(nested)
    # A shape is a count read from the dict: bounded before gymnasium broadcasts a scalar bound to it.
    scalar = _npy(np.array(0.0, dtype=np.float32))
    for shape in ([1 << 20, 1 << 20], [-1, 4]):
        with pytest.raises(ValueError, match="sizes must be non-negative and name at most"):
            gym_space_from_dict({**box, "low": scalar, "high": scalar, "shape": shape})
    with pytest.raises(ValueError, match="name at most"):
        gym_space_from_dict({"space": "multi-binary", "n": [1 << 20, 1 << 20]})
    with pytest.raises(ValueError, match="unknown space kind 'graph'"):
        gym_space_from_dict({"space": "graph"})
    with pytest.raises(ValueError, match="no serialized form"):
        gym_space_to_dict(gym.spaces.Sequence(gym.spaces.Discrete(2)))

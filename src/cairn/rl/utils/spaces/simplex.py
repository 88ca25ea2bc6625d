"""RLlib's ``Simplex`` space (``ray.rllib.utils.spaces.simplex``): points whose last axis sums to 1."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np

__all__ = ["Simplex"]


class Simplex(gym.Space[np.ndarray]):
    """``shape[:-1]`` independent points of the ``shape[-1]``-dimensional simplex (coordinates >= 0, summing to 1).

    Samples are Dirichlet draws with ``concentration`` (default all ones: uniform).

    Args:
        shape: The shape of one item; the simplex is over its last axis.
        concentration: The Dirichlet parameters, ``shape[-1]`` of them.
        dtype: The items' dtype.

    Raises:
        ValueError: ``shape`` is no tuple or list of positive ints, or ``concentration`` is
            not ``shape[-1]`` positive numbers.
    """

    def __init__(self, shape: Sequence[int], concentration: Any = None, dtype: Any = np.float32) -> None:
        if not isinstance(shape, tuple | list) or not shape or not all(isinstance(d, int) and d > 0 for d in shape):
            raise ValueError(f"Simplex(shape={shape!r:.60}): give a tuple of positive ints.")
        super().__init__(tuple(shape), dtype)
        self.dim = int(shape[-1])
        conc = np.ones(self.dim) if concentration is None else np.asarray(concentration, dtype=np.float64)
        if conc.shape != (self.dim,) or not np.all(conc > 0):
            raise ValueError(
                f"Simplex: concentration {conc.tolist()!r:.80} must be {self.dim} positive numbers "
                f"(one per coordinate of the last axis of shape {tuple(shape)})."
            )
        self.concentration = conc

    @property
    def is_np_flattenable(self) -> bool:
        """An item is an array of fixed shape."""
        return True

    def sample(self, mask: Any = None, probability: Any = None) -> np.ndarray:
        """A Dirichlet draw for each point, from the space's RNG."""
        shape = self.shape or ()
        return self.np_random.dirichlet(self.concentration, size=shape[:-1]).astype(self.dtype)

    def contains(self, x: Any) -> bool:
        """Whether ``x`` has the shape, no negative coordinate, and sums to 1 along its last axis."""
        arr = np.asarray(x)
        return arr.shape == self.shape and bool(np.all(arr >= 0)) and bool(np.allclose(arr.sum(-1), 1.0))

    def __repr__(self) -> str:
        return f"Simplex({self.shape}; {self.concentration})"

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Simplex)
            and self.shape == other.shape
            and np.allclose(self.concentration, other.concentration)
        )

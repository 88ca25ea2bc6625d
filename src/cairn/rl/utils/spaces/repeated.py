"""RLlib's ``Repeated`` space (``ray.rllib.utils.spaces.repeated``): a list of up to ``max_len`` child items."""

from __future__ import annotations

from typing import Any

import gymnasium as gym

__all__ = ["Repeated"]


class Repeated(gym.Space[list[Any]]):
    """Lists of 0 to ``max_len`` items of ``child_space`` (a variable number of objects, say).

    Args:
        child_space: The space of each item.
        max_len: The most items a list holds.

    Raises:
        ValueError: ``child_space`` is no space, or ``max_len`` is not a positive int.
    """

    def __init__(self, child_space: gym.Space[Any], max_len: int) -> None:
        if not isinstance(child_space, gym.Space):
            raise ValueError(f"Repeated(child_space={child_space!r:.60}): give a gymnasium space.")
        if isinstance(max_len, bool) or not isinstance(max_len, int) or max_len < 1:
            raise ValueError(f"Repeated(max_len={max_len!r:.40}): give a positive int.")
        super().__init__()
        self.child_space = child_space
        self.max_len = max_len

    def sample(self, mask: Any = None, probability: Any = None) -> list[Any]:
        """A list of a random length (1 to ``max_len``) of child samples."""
        return [self.child_space.sample() for _ in range(int(self.np_random.integers(1, self.max_len + 1)))]

    def contains(self, x: Any) -> bool:
        """Whether ``x`` is a list of at most ``max_len`` items of the child space."""
        return isinstance(x, list | tuple) and len(x) <= self.max_len and all(self.child_space.contains(c) for c in x)

    def __repr__(self) -> str:
        return f"Repeated({self.child_space}, {self.max_len})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Repeated) and self.child_space == other.child_space and self.max_len == other.max_len

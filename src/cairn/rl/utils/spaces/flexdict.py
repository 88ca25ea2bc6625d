"""RLlib's ``FlexDict`` space (``ray.rllib.utils.spaces.flexdict``): a Dict space filled key by key."""

from __future__ import annotations

from typing import Any

import gymnasium as gym

__all__ = ["FlexDict"]


class FlexDict(gym.spaces.Dict):
    """A :class:`gymnasium.spaces.Dict` whose subspaces may be set after it is made (``space["key"] = subspace``).

    Keys set later keep the order they were set in (gymnasium's Dict sorts those of a plain dict it is made from).

    Raises:
        ValueError: A value set is no gymnasium space.
    """

    def __init__(self, spaces: dict[Any, gym.Space[Any]] | None = None, seed: Any = None) -> None:
        super().__init__(spaces or {}, seed=seed)

    def __setitem__(self, key: Any, space: gym.Space[Any]) -> None:
        if not isinstance(space, gym.Space):
            raise ValueError(f"FlexDict[{key!r:.40}] = {space!r:.60}: the value must be a gymnasium space.")
        self.spaces[key] = space

    def __repr__(self) -> str:
        return "FlexDict(" + ", ".join(f"{k!r}: {s}" for k, s in self.spaces.items()) + ")"

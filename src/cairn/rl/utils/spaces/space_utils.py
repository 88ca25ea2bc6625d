"""RLlib's ``space_utils`` functions that its tests build data with: :func:`batch`, :func:`get_dummy_batch_for_space`.

``batch`` stacks single items of a space (arrays, or dicts/tuples of them) into one
item of arrays with a leading batch axis (:func:`cairn.rl.utils.nested.stack_rows`).
``get_dummy_batch_for_space`` fills a space's shapes with one value. Discrete and
MultiDiscrete parts can be asked for one-hot (``one_hot_discrete=True``: float32
vectors of ``n`` or ``sum(nvec)`` slots, all ``fill_value``, which is RLlib's
"zero-hot" for 0).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np

from cairn.rl.utils.nested import stack_rows

__all__ = ["batch", "get_dummy_batch_for_space", "one_hot_for_space"]


def batch(items: Sequence[Any]) -> Any:
    """One batch (leading axis ``len(items)``) of the single items ``items`` of one structure.

    Raises:
        ValueError: No items (a batch of nothing has no structure to take).
    """
    if not items:
        raise ValueError("batch() got no items: give at least one item to take the structure from.")
    return stack_rows(list(items))


def get_dummy_batch_for_space(
    space: gym.Space[Any],
    batch_size: int = 32,
    *,
    fill_value: float = 0.0,
    one_hot_discrete: bool = False,
) -> Any:
    """A batch of ``batch_size`` items of ``space`` (no batch axis for 0), every value ``fill_value``.

    Dict and Tuple spaces give a dict/tuple of such batches. RLlib's ``time_size`` and
    ``fill_value="random"`` are not offered.

    Raises:
        ValueError: A negative ``batch_size``, or a space that is not Box, Discrete,
            MultiDiscrete, MultiBinary, Dict or Tuple.
    """
    if batch_size < 0:
        raise ValueError(f"get_dummy_batch_for_space(batch_size={batch_size}): give 0 (no batch axis) or more.")
    if isinstance(space, gym.spaces.Dict):
        return {
            key: get_dummy_batch_for_space(sub, batch_size, fill_value=fill_value, one_hot_discrete=one_hot_discrete)
            for key, sub in space.spaces.items()
        }
    if isinstance(space, gym.spaces.Tuple):
        return tuple(
            get_dummy_batch_for_space(sub, batch_size, fill_value=fill_value, one_hot_discrete=one_hot_discrete)
            for sub in space.spaces
        )
    lead = (batch_size,) if batch_size > 0 else ()
    if one_hot_discrete and isinstance(space, gym.spaces.Discrete):
        return np.full((*lead, int(space.n)), fill_value, np.float32)
    if one_hot_discrete and isinstance(space, gym.spaces.MultiDiscrete):
        return np.full((*lead, int(np.sum(space.nvec))), fill_value, np.float32)
    if isinstance(space, gym.spaces.Box | gym.spaces.Discrete | gym.spaces.MultiDiscrete | gym.spaces.MultiBinary):
        return np.full((*lead, *(space.shape or ())), fill_value, space.dtype)
    raise ValueError(
        f"get_dummy_batch_for_space: {type(space).__name__} is not one of Box, Discrete, MultiDiscrete, "
        "MultiBinary, Dict, Tuple."
    )


def one_hot_for_space(item: Any, space: gym.Space[Any]) -> Any:
    """``item`` (one item of ``space``, or a batch of them) with its Discrete parts one-hot (float32).

    A MultiDiscrete part becomes the concatenation of its slots' one-hot vectors
    (``sum(nvec)`` long); other parts are returned as they are.
    """
    if isinstance(space, gym.spaces.Dict):
        return {key: one_hot_for_space(item[key], sub) for key, sub in space.spaces.items()}
    if isinstance(space, gym.spaces.Tuple):
        return tuple(one_hot_for_space(item[i], sub) for i, sub in enumerate(space.spaces))
    if isinstance(space, gym.spaces.Discrete):
        values = np.asarray(item, np.int64) - int(space.start)
        return np.eye(int(space.n), dtype=np.float32)[values]
    if isinstance(space, gym.spaces.MultiDiscrete):
        values = np.asarray(item, np.int64)
        nvec = np.asarray(space.nvec).reshape(-1)
        flat = values.reshape(*values.shape[: values.ndim - np.asarray(space.nvec).ndim], -1)
        parts = [np.eye(int(n), dtype=np.float32)[flat[..., i]] for i, n in enumerate(nvec)]
        return np.concatenate(parts, axis=-1)
    return item

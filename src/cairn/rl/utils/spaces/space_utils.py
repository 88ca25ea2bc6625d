"""RLlib's ``space_utils`` functions: :func:`batch`/:func:`unbatch`, :func:`get_dummy_batch_for_space` and the others.

``batch`` stacks single items of a space (arrays, or dicts/tuples of them) into one
item of arrays with a leading batch axis (:func:`cairn.rl.utils.nested.stack_rows`).
``get_dummy_batch_for_space`` fills a space's shapes with one value. Discrete and
MultiDiscrete parts can be asked for one-hot (``one_hot_discrete=True``: float32
vectors of ``n`` or ``sum(nvec)`` slots, all ``fill_value``, which is RLlib's
"zero-hot" for 0). :func:`unbatch` is ``batch``'s inverse; :func:`get_base_struct_from_space`,
:func:`unsquash_action` and :func:`convert_element_to_space_type` are RLlib's helpers for
actions and observations of composite spaces.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import gymnasium as gym
import numpy as np

from cairn.rl.utils.nested import concat_rows, index_rows, leading_rows, stack_rows

__all__ = [
    "batch",
    "convert_element_to_space_type",
    "get_base_struct_from_space",
    "get_dummy_batch_for_space",
    "one_hot_for_space",
    "unbatch",
    "unsquash_action",
]


def batch(items: Sequence[Any], individual_items_already_have_batch_dim: bool = False) -> Any:
    """One batch (leading axis ``len(items)``) of the single items ``items`` of one structure.

    With ``individual_items_already_have_batch_dim`` (RLlib's), each item is itself a
    batch and their rows are concatenated instead.

    Raises:
        ValueError: No items (a batch of nothing has no structure to take).
    """
    if not items:
        raise ValueError("batch() got no items: give at least one item to take the structure from.")
    if individual_items_already_have_batch_dim:
        return concat_rows(list(items))
    return stack_rows(list(items))


def unbatch(batches_struct: Any) -> list[Any]:
    """The items of a batch (arrays, or dicts/tuples of them), one structure per row (RLlib's).

    ``unbatch(batch(items))`` gives ``items`` back (each leaf a row of its array).
    """
    return [index_rows(batches_struct, row) for row in range(leading_rows(batches_struct))]


def get_base_struct_from_space(space: gym.Space[Any]) -> Any:
    """A Dict/Tuple space as a dict/tuple of its (primitive) subspaces, nested alike (RLlib's)."""
    if isinstance(space, gym.spaces.Tuple):
        return tuple(get_base_struct_from_space(sub) for sub in space.spaces)
    if isinstance(space, gym.spaces.Dict):
        return {key: get_base_struct_from_space(sub) for key, sub in space.spaces.items()}
    return space


def unsquash_action(action: Any, action_space_struct: Any) -> Any:
    """``action`` with each bounded ``Box`` part mapped from ``[-1, 1]`` to its bounds (RLlib's).

    A float Box part becomes ``low + (a + 1) * (high - low) / 2``, clipped to the bounds;
    an integer Box part is shifted by ``low`` (``low + a``). Other parts are returned as
    they are. ``action_space_struct`` is :func:`get_base_struct_from_space` of the space.
    """
    if isinstance(action_space_struct, Mapping):
        return {key: unsquash_action(action[key], sub) for key, sub in action_space_struct.items()}
    if isinstance(action_space_struct, tuple):
        return tuple(unsquash_action(action[i], sub) for i, sub in enumerate(action_space_struct))
    space = action_space_struct
    if not (isinstance(space, gym.spaces.Box) and np.all(space.bounded_below) and np.all(space.bounded_above)):
        return action
    if np.issubdtype(space.dtype, np.floating):
        return np.clip(space.low + (np.asarray(action) + 1.0) * (space.high - space.low) / 2.0, space.low, space.high)
    if np.issubdtype(space.dtype, np.integer):
        return space.low + action
    return action


def convert_element_to_space_type(element: Any, sampled_element: Any) -> Any:
    """``element`` with each part given the type of the same part of ``sampled_element`` (RLlib's).

    An array part takes the sample's dtype; a number where the sample has a 0-d array
    becomes one; a float where the sample has an int becomes that int. Dicts and
    tuples (or lists) are matched part by part.

    Raises:
        ValueError: The structures differ, or a number stands where the sample has an
            array with dimensions.
    """
    if isinstance(sampled_element, Mapping):
        if not isinstance(element, Mapping) or set(element) != set(sampled_element):
            raise ValueError(
                f"convert_element_to_space_type: the element's keys {sorted(map(str, element))} are not the "
                f"space's {sorted(map(str, sampled_element))}."
            )
        return {key: convert_element_to_space_type(element[key], sampled_element[key]) for key in element}
    if isinstance(sampled_element, tuple | list):
        if not isinstance(element, tuple | list) or len(element) != len(sampled_element):
            raise ValueError("convert_element_to_space_type: the element is no tuple of the space's length.")
        return type(element)(convert_element_to_space_type(e, s) for e, s in zip(element, sampled_element, strict=True))
    if isinstance(sampled_element, np.ndarray):
        if isinstance(element, np.ndarray):
            return element if element.dtype == sampled_element.dtype else element.astype(sampled_element.dtype)
        if sampled_element.shape != () or not isinstance(element, int | float | np.number):
            raise ValueError(
                f"convert_element_to_space_type: {type(element).__name__} {element!r:.40} where the space has "
                f"an array of shape {sampled_element.shape}."
            )
        return np.array(element, dtype=sampled_element.dtype)
    if isinstance(sampled_element, int | np.integer):
        if isinstance(element, float) and element.is_integer():
            return int(element)
        if isinstance(element, np.floating):
            return np.int64(element)
    return element


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

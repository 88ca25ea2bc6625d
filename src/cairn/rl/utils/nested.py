"""Batched observations of any gymnasium space: arrays, or dicts/tuples of them (gymnasium's vector layout).

A vector environment with a Dict observation space gives a dict of batched
arrays; a Tuple space a tuple of them. The env runners select, stack and copy
such batches with these helpers, and record them in checkpoints as plain data
(:func:`to_state` / :func:`from_state`: a tuple is recorded as a list and
rebuilt from the live batch's structure).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

__all__ = [
    "concat_rows",
    "copy_rows",
    "from_state",
    "index_rows",
    "leading_rows",
    "map_leaves",
    "same_layout",
    "set_rows",
    "stack_rows",
    "take_rows",
    "to_state",
]


def map_leaves(fn: Callable[[Any], Any], batch: Any) -> Any:
    """``batch`` with ``fn`` applied to every leaf (array or tensor), in the same dict/tuple structure."""
    if isinstance(batch, Mapping):
        return {key: map_leaves(fn, value) for key, value in batch.items()}
    if isinstance(batch, tuple):
        return tuple(map_leaves(fn, value) for value in batch)
    return fn(batch)


def index_rows(batch: Any, rows: Any) -> Any:
    """``leaf[rows]`` of every leaf of ``batch``, kept as it is (a tensor stays a tensor, unlike :func:`take_rows`)."""
    return map_leaves(lambda leaf: leaf[rows], batch)


def leading_rows(batch: Any) -> int:
    """The length of the first dimension of ``batch`` (of its first leaf when nested).

    Raises:
        ValueError: A dict or tuple without leaves.
    """
    while isinstance(batch, Mapping | tuple):
        leaves = list(batch.values()) if isinstance(batch, Mapping) else list(batch)
        if not leaves:
            raise ValueError("An empty dict or tuple of observations has no rows.")
        batch = leaves[0]
    return int(batch.shape[0])


def concat_rows(batches: Sequence[Any]) -> Any:
    """One batch of the rows of ``batches`` (arrays, or dicts/tuples of them of one structure), in order."""
    first = batches[0]
    if isinstance(first, Mapping):
        return {key: concat_rows([b[key] for b in batches]) for key in first}
    if isinstance(first, tuple):
        return tuple(concat_rows([b[i] for b in batches]) for i in range(len(first)))
    return np.concatenate([np.asarray(b) for b in batches])


def take_rows(batch: Any, rows: Any) -> Any:
    """The rows ``rows`` (an index array or slice) of every leaf of ``batch``."""
    if isinstance(batch, Mapping):
        return {key: take_rows(value, rows) for key, value in batch.items()}
    if isinstance(batch, tuple):
        return tuple(take_rows(value, rows) for value in batch)
    return np.asarray(batch)[rows]


def stack_rows(items: Sequence[Any]) -> Any:
    """One batch of the single (unbatched) observations ``items``."""
    first = items[0]
    if isinstance(first, Mapping):
        return {key: stack_rows([item[key] for item in items]) for key in first}
    if isinstance(first, tuple):
        return tuple(stack_rows([item[i] for item in items]) for i in range(len(first)))
    return np.stack([np.asarray(item) for item in items])


def set_rows(batch: Any, rows: Any, values: Any) -> None:
    """Write ``values`` (a batch of ``len(rows)`` rows) into the rows ``rows`` of ``batch``, in place."""
    if isinstance(batch, Mapping):
        for key in batch:
            set_rows(batch[key], rows, values[key])
    elif isinstance(batch, tuple):
        for i, leaf in enumerate(batch):
            set_rows(leaf, rows, values[i])
    else:
        batch[rows] = values


def copy_rows(batch: Any) -> Any:
    """A copy of ``batch`` whose arrays share no memory with it."""
    if isinstance(batch, Mapping):
        return {key: copy_rows(value) for key, value in batch.items()}
    if isinstance(batch, tuple):
        return tuple(copy_rows(value) for value in batch)
    return np.array(batch, copy=True)


def to_state(batch: Any) -> Any:
    """``batch`` as checkpoint data: arrays copied, tuples as lists."""
    if isinstance(batch, Mapping):
        return {str(key): to_state(value) for key, value in batch.items()}
    if isinstance(batch, tuple):
        return [to_state(value) for value in batch]
    return np.array(batch, copy=True)


def same_layout(template: Any, state: Any) -> bool:
    """Whether ``state`` (from :func:`to_state`) has the keys, lengths and array shapes of ``template``."""
    if isinstance(template, Mapping):
        return (
            isinstance(state, Mapping)
            and set(state) == {str(k) for k in template}
            and all(same_layout(value, state[str(key)]) for key, value in template.items())
        )
    if isinstance(template, tuple):
        return (
            isinstance(state, list | tuple)
            and len(state) == len(template)
            and all(same_layout(t, s) for t, s in zip(template, state, strict=True))
        )
    return isinstance(state, np.ndarray) and state.shape == np.shape(template)


def from_state(template: Any, state: Any) -> Any:
    """Rebuild a batch from :func:`to_state` data, in the structure and dtypes of ``template``.

    Call only after :func:`same_layout` said yes.
    """
    if isinstance(template, Mapping):
        return {key: from_state(value, state[str(key)]) for key, value in template.items()}
    if isinstance(template, tuple):
        return tuple(from_state(t, s) for t, s in zip(template, state, strict=True))
    return np.array(state, dtype=np.asarray(template).dtype, copy=True)

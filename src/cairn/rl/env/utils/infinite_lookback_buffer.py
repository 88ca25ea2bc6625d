"""RLlib's ``InfiniteLookbackBuffer`` at its path, on cairn's :class:`~cairn.rl.env.lookback_buffer.LookbackBuffer`.

The index rules (ints, lists, slices, ``neg_index_as_lookback``, ``fill``) are
:class:`LookbackBuffer`'s; this class adds what RLlib's has around them:

- ``finalize()``: ``data`` becomes one batch (arrays with a leading axis, or a
  dict/tuple of them, as :func:`~cairn.rl.utils.spaces.space_utils.batch` makes),
  and reads of several items return such a batch. A finalized buffer still takes
  ``append``/``extend``/``pop``/``set``; each of those, and each read, goes through
  the list of its items (built from the batch), so it costs time linear in the
  buffer's length: the class serves episodes and tests, not a replay buffer.
- ``space``: with it, ``fill`` stands for a whole item of the space (every value
  ``fill``), and ``one_hot_discrete=True`` returns Discrete/MultiDiscrete parts
  one-hot (a filled item zero-hot, as RLlib does).
- ``pop``, ``concat``, ``len_incl_lookback``, ``buffer[i] = x``, ``get_state()`` /
  ``from_state()`` (plain data; the space object itself, not a dict of it) and ``==``.
"""

from __future__ import annotations

import builtins
from collections.abc import Mapping, Sequence
from typing import Any

import gymnasium as gym
import numpy as np

from cairn.rl.env.lookback_buffer import Indices, LookbackBuffer
from cairn.rl.utils.nested import concat_rows, index_rows, leading_rows, map_leaves
from cairn.rl.utils.spaces.space_utils import batch, get_dummy_batch_for_space, one_hot_for_space

__all__ = ["InfiniteLookbackBuffer"]


def _same(a: Any, b: Any) -> bool:
    # Items are nested dicts/tuples of arrays and scalars: compare leaf by leaf, arrays by value.
    if isinstance(a, Mapping) or isinstance(b, Mapping):
        return (
            isinstance(a, Mapping) and isinstance(b, Mapping) and set(a) == set(b) and all(_same(a[k], b[k]) for k in a)
        )
    if isinstance(a, tuple | list) or isinstance(b, tuple | list):
        return (
            isinstance(a, tuple | list)
            and isinstance(b, tuple | list)
            and len(a) == len(b)
            and all(_same(x, y) for x, y in zip(a, b, strict=True))
        )
    return bool(np.array_equal(np.asarray(a), np.asarray(b)))


class InfiniteLookbackBuffer(LookbackBuffer):
    """``data`` (a list, or after :meth:`finalize` one batch) whose first ``lookback`` items are lookback.

    Args:
        data: The items (a list, not copied), or an already finalized batch.
        lookback: How many of the first items lie before the episode's start.
        space: The items' space: needed for ``one_hot_discrete`` and lets ``fill`` stand for a whole item.
    """

    def __init__(self, data: Any = None, lookback: int = 0, space: gym.Space[Any] | None = None) -> None:
        self.finalized = data is not None and not isinstance(data, list)
        if self.finalized:
            self.data = data
            self.lookback = min(int(lookback), self.len_incl_lookback())
        else:
            super().__init__(data, lookback)
        self.space = space

    # ------------------------------------------------------------------ sizes, equality, state

    def len_incl_lookback(self) -> int:
        """The number of items, lookback included."""
        if not self.finalized:
            return len(self.data)
        return leading_rows(self.data) if not isinstance(self.data, np.ndarray) else int(self.data.shape[0])

    def __len__(self) -> int:
        return max(self.len_incl_lookback() - self.lookback, 0)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, InfiniteLookbackBuffer):
            return NotImplemented
        return (
            self.lookback == other.lookback
            and self.finalized == other.finalized
            and self.space == other.space
            and _same(self.data, other.data)
        )

    def get_state(self) -> dict[str, Any]:
        """The buffer as plain data: ``data``, ``lookback``, ``finalized`` and ``space``."""
        return {"data": self.data, "lookback": self.lookback, "finalized": self.finalized, "space": self.space}

    @staticmethod
    def from_state(state: Mapping[str, Any]) -> InfiniteLookbackBuffer:
        """A buffer from :meth:`get_state`'s data.

        Raises:
            ValueError: ``state`` misses one of the four keys, or says ``finalized``
                where its data is a list (or the other way round).
        """
        missing = {"data", "lookback", "finalized", "space"} - set(state)
        if missing:
            raise ValueError(f"InfiniteLookbackBuffer.from_state: the state lacks {sorted(missing)}.")
        if bool(state["finalized"]) == isinstance(state["data"], list):
            raise ValueError(
                f"InfiniteLookbackBuffer.from_state: finalized={state['finalized']} but the data is a "
                f"{type(state['data']).__name__}; a finalized buffer holds a batch, an ongoing one a list."
            )
        return InfiniteLookbackBuffer(state["data"], int(state["lookback"]), state["space"])

    # ------------------------------------------------------------------ the items as a list

    def _items(self) -> list[Any]:
        if not self.finalized:
            return list(self.data)
        return [index_rows(self.data, i) for i in range(self.len_incl_lookback())]

    def _store(self, items: list[Any]) -> None:
        # A finalized buffer keeps a batch; one emptied by pop keeps an empty array.
        self.data = (batch(items) if items else np.asarray([])) if self.finalized else items  # type: ignore[assignment]  # a batch once finalized (RLlib's layout)

    def _batched(self, items: list[Any]) -> Any:
        return (batch(items) if items else np.asarray([])) if self.finalized else items

    # ------------------------------------------------------------------ changes

    def append(self, item: Any) -> None:
        """Add one item at the end."""
        if self.finalized:
            self.data = concat_rows([self.data, map_leaves(lambda leaf: np.asarray(leaf)[np.newaxis], item)])
        else:
            self.data.append(item)

    def extend(self, items: Sequence[Any]) -> None:
        """Add items (a list of items, or a batch when finalized) at the end."""
        if self.finalized:
            more = batch(list(items)) if isinstance(items, list) else items
            if isinstance(items, list) and not items:
                return
            self.data = concat_rows([self.data, more])
        else:
            self.data.extend(items)

    def concat(self, other: LookbackBuffer) -> None:
        """Add ``other``'s items without its lookback at the end."""
        self.extend(other.get())

    def pop(self, index: int = -1) -> None:
        """Remove the item at ``index`` (of all data, lookback included; RLlib's) without returning it.

        Raises:
            IndexError: ``index`` is outside the data.
        """
        items = self._items()
        items.pop(index)
        self._store(items)

    def finalize(self) -> None:
        """Turn the list of items into one batch (see the module); a second call changes nothing."""
        if not self.finalized:
            self.data = batch(self.data) if self.data else np.asarray([])  # type: ignore[assignment]  # a batch from now on
            self.finalized = True

    def set(self, new_data: Any, *, at_indices: Indices = None, neg_index_as_lookback: bool = False) -> None:
        """Overwrite the items ``at_indices`` addresses (:meth:`LookbackBuffer.set`'s rules).

        Raises:
            IndexError: An index outside the data, or a count of new items that differs from the indices'.
        """
        if not self.finalized:
            super().set(new_data, at_indices=at_indices, neg_index_as_lookback=neg_index_as_lookback)
            return
        as_list = LookbackBuffer(self._items(), self.lookback)
        values = new_data if isinstance(at_indices, int) else self._rows_of(new_data)
        as_list.set(values, at_indices=at_indices, neg_index_as_lookback=neg_index_as_lookback)
        self._store(as_list.data)

    def _rows_of(self, new_data: Any) -> list[Any]:
        # A finalized buffer is set with a batch or a list of items.
        if isinstance(new_data, list):
            return new_data
        return [index_rows(new_data, i) for i in range(leading_rows(new_data))]

    def __setitem__(self, key: int | builtins.slice | list[int], value: Any) -> None:
        self.set(value, at_indices=key)

    # ------------------------------------------------------------------ reads

    def get(  # type: ignore[override]  # RLlib's keywords: one_hot_discrete, not ignore_last/add_last
        self,
        indices: Indices = None,
        *,
        neg_index_as_lookback: bool = False,
        fill: Any = None,
        one_hot_discrete: bool = False,
    ) -> Any:
        """The items ``indices`` addresses (:class:`LookbackBuffer`'s rules); several as a batch once finalized.

        Raises:
            IndexError: An int index outside the data, without ``fill``.
            ValueError: ``one_hot_discrete`` on a buffer without a space.
        """
        if one_hot_discrete and self.space is None:
            raise ValueError(
                "InfiniteLookbackBuffer.get(one_hot_discrete=True) needs the buffer's space: build it with space=."
            )
        items = self._items()
        space = self.space
        if one_hot_discrete and space is not None:
            items = [one_hot_for_space(item, space) for item in items]
        if fill is not None and space is not None:
            fill = get_dummy_batch_for_space(space, 0, fill_value=fill, one_hot_discrete=one_hot_discrete)
        out = LookbackBuffer(items, self.lookback).get(indices, neg_index_as_lookback=neg_index_as_lookback, fill=fill)
        return out if isinstance(indices, int) else self._batched(out)

    def __getitem__(self, item: int | builtins.slice | list[int]) -> Any:
        return self.get(item)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(len={len(self)}, lookback={self.lookback}, finalized={self.finalized}, "
            f"data={self.data!r:.200})"
        )

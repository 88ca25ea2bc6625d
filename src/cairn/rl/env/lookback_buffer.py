"""A list with a lookback buffer, read with RLlib's index rules (``InfiniteLookbackBuffer``'s list mode).

A :class:`LookbackBuffer` holds ``data`` whose first ``lookback`` items lie before the episode's
start. Its getter takes RLlib's ``indices``:

- ``None``: the episode's part (``data[lookback:]``);
- an int: from the episode's start (``0`` is ``data[lookback]``); a negative int counts from the
  end (into the lookback buffer when it reaches it), or, with ``neg_index_as_lookback=True``,
  back from the episode's start into the lookback buffer;
- a list of ints: one item per index, in the list's order;
- a slice: Python's, with the same reading of its bounds, any step (negative too).

``fill`` stands in for every position outside the data (a slice is then padded to its full
length); without it an int outside the data raises ``IndexError`` and a slice is cut to the data.
Two options serve :class:`~cairn.rl.env.multi_agent_episode.MultiAgentEpisode`: ``ignore_last``
reads the data without its last item, ``add_last`` with one more item at its end (an agent's
action or reward that is still *hanging*: chosen, not yet completed by an observation).

This module imports nothing of ``cairn.rl``.
"""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from typing import Any

__all__ = ["Indices", "LookbackBuffer"]

Indices = int | builtins.slice | Sequence[int] | None

# A stop before every position (a negative-step slice that runs to the data's first item).
_BEFORE_ALL = -(10**12)


class LookbackBuffer:
    """``data`` (a list, not copied) of which the first ``lookback`` items are lookback (see the module).

    ``len()`` is the episode's part; ``buffer[i]`` is ``buffer.get(i)``.
    """

    def __init__(self, data: list[Any] | None = None, lookback: int = 0) -> None:
        self.data: list[Any] = data if data is not None else []
        self.lookback = min(int(lookback), len(self.data))

    def __len__(self) -> int:
        return max(len(self.data) - self.lookback, 0)

    def __getitem__(self, item: int | builtins.slice | list[int]) -> Any:
        return self.get(item)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, LookbackBuffer):
            return NotImplemented
        return self.data == other.data and self.lookback == other.lookback

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.data[: self.lookback]!r} <- lookback | {self.data[self.lookback :]!r})"

    def append(self, item: Any) -> None:
        """Add one item at the end."""
        self.data.append(item)

    def extend(self, items: Sequence[Any]) -> None:
        """Add items at the end."""
        self.data.extend(items)

    def get(
        self,
        indices: Indices = None,
        *,
        neg_index_as_lookback: bool = False,
        fill: Any = None,
        ignore_last: bool = False,
        add_last: Any = None,
    ) -> Any:
        """The items ``indices`` address (see the module for the rules and the options).

        Raises:
            IndexError: An int index outside the data, without ``fill``.
        """
        items = self.data[:-1] if ignore_last else self.data
        if add_last is not None:
            items = [*items, add_last]
        if indices is None:
            # RLlib reads "all" as the plain slice: no hanging item.
            plain = self.data[:-1] if ignore_last else self.data
            return list(plain[self.lookback :])
        if isinstance(indices, builtins.slice):
            return self._slice(items, indices, neg_index_as_lookback, fill)
        if isinstance(indices, int):
            return self._one(items, indices, neg_index_as_lookback, fill, ignore_last)
        return [self._one(items, int(i), neg_index_as_lookback, fill, ignore_last) for i in indices]

    def _one(self, items: list[Any], index: int, neg_index_as_lookback: bool, fill: Any, ignore_last: bool) -> Any:
        position = self.lookback + index if index >= 0 or neg_index_as_lookback else index
        if neg_index_as_lookback and position < 0:
            # Before the lookback buffer: past the end, so that only `fill` answers (RLlib's rule).
            position = len(self) + self.lookback - int(ignore_last)
        try:
            return items[position]
        except IndexError:
            if fill is None:
                raise IndexError(
                    f"index {index} is outside the {len(items) - self.lookback} items (and {self.lookback} of "
                    "lookback) of this buffer; give fill= to pad instead."
                ) from None
            return fill

    def _slice(self, items: list[Any], slice_: builtins.slice, neg_index_as_lookback: bool, fill: Any) -> list[Any]:
        size = len(items)

        def position(value: int | None, default: int) -> int:
            if value is None:
                return default
            if value < 0:
                return self.lookback + value if neg_index_as_lookback else size + value
            return self.lookback + value

        start, stop = position(slice_.start, self.lookback), position(slice_.stop, size)
        left = right = 0
        if start < 0 and stop < 0:
            left, start, stop = abs(start - stop), 0, 0
        elif start >= size and stop >= size:
            right, start, stop = abs(start - stop), size, size
        elif start < 0:
            left, start = -start, 0
        elif stop >= size:
            right, stop = stop - size, size
        elif stop < 0:
            # A negative step that runs past the first item.
            if start >= size:
                left, start = start - size + 1, size - 1
            right, stop = -stop - 1, _BEFORE_ALL
        step = slice_.step if slice_.step is not None else 1
        picked = items[start : (None if stop == _BEFORE_ALL else stop) : step]
        if fill is None or not (left or right):
            return list(picked)
        return [fill] * left + list(picked) + [fill] * right

    def set(self, new_data: Any, *, at_indices: Indices = None, neg_index_as_lookback: bool = False) -> None:
        """Overwrite the items ``at_indices`` addresses (a list or slice takes one new item each).

        Raises:
            IndexError: An index outside the data, or a count of new items that differs from the indices'.
        """
        if isinstance(at_indices, int):
            self.data[self._set_position(at_indices, neg_index_as_lookback)] = new_data
            return
        if at_indices is None or isinstance(at_indices, builtins.slice):
            slice_ = at_indices if at_indices is not None else builtins.slice(None, None)
            start = self.lookback if slice_.start is None else self._set_position(slice_.start, neg_index_as_lookback)
            stop = len(self.data) if slice_.stop is None else self._set_position(slice_.stop, neg_index_as_lookback)
            positions = list(range(start, stop, slice_.step or 1))
        else:
            positions = [self._set_position(int(i), neg_index_as_lookback) for i in at_indices]
        values = list(new_data)
        if len(values) != len(positions) or any(not 0 <= p < len(self.data) for p in positions):
            raise IndexError(
                f"cannot set {len(values)} items at {at_indices!r:.60} (neg_index_as_lookback="
                f"{neg_index_as_lookback}): the buffer has {len(self.data)} items; give one new item per index."
            )
        for p, value in zip(positions, values, strict=True):
            self.data[p] = value

    def _set_position(self, index: int, neg_index_as_lookback: bool) -> int:
        position = self.lookback + index if index >= 0 or neg_index_as_lookback else len(self.data) + index
        if not 0 <= position <= len(self.data):
            raise IndexError(f"index {index} is outside this buffer's {len(self.data)} items.")
        return position

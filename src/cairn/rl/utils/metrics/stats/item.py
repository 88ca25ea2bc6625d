"""RLlib's :class:`ItemStats` (the last item) and :class:`ItemSeriesStats` (the last ``window`` items)."""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from cairn.rl.utils.metrics.stats.base import StatsBase, _check_item, _check_window

__all__ = ["ItemSeriesStats", "ItemStats"]


class ItemStats(StatsBase):
    """The last item logged (RLlib's ``ItemStats``): a number, a string or None; never reduced."""

    stats_cls_identifier = "item"

    def __init__(self, is_root: bool = False, is_leaf: bool = True) -> None:
        super().__init__(is_root=is_root, is_leaf=is_leaf)
        self._item: Any = None

    def __len__(self) -> int:
        return 1

    def push(self, item: Any) -> None:
        """Replace the item."""
        self._item = _check_item(item, what="ItemStats")

    def merge(self, incoming_stats: Sequence[StatsBase]) -> None:
        """Take the item of the one incoming stat."""
        if len(incoming_stats) != 1:
            raise AssertionError(
                "ItemStats should only be merged with one other ItemStats object, which replaces the current item "
                f"(got {len(incoming_stats)})."
            )
        self._item = incoming_stats[0]._item  # type: ignore[attr-defined]

    def peek(self, compile: bool = True, latest_merged_only: bool = False) -> Any:
        """The item (``[item]`` with ``compile=False``)."""
        return self._item if compile else [self._item]

    def reduce(self, compile: bool = True) -> Any:
        """The item; the stat starts empty."""
        item, self._item = self._item, None
        if compile:
            return item
        out = self.clone()
        assert isinstance(out, ItemStats)
        out._item = item
        return out

    def _read_latest_merged(self, value: Any) -> Any:
        return None

    def get_state(self) -> dict[str, Any]:
        return {**super().get_state(), "item": self._item}

    def set_state(self, state: Mapping[str, Any]) -> None:
        super().set_state(state)
        self._item = _check_item(state["item"], what="item")


class ItemSeriesStats(StatsBase):
    """The last ``window`` items, as a list (RLlib's ``ItemSeriesStats``); never reduced.

    An aggregation stat keeps every item merged this cycle (up to ``window`` per part).
    """

    stats_cls_identifier = "item_series"

    def __init__(self, window: int | float | None = None, is_root: bool = False, is_leaf: bool = True) -> None:
        super().__init__(is_root=is_root, is_leaf=is_leaf)
        self._window = _check_window(window)
        self.items: list[Any] | deque[Any] = []
        self._set_items([])

    def _set_items(self, items: Iterable[Any]) -> None:
        if self._window is not None and self.is_leaf:
            self.items = deque(items, maxlen=self._window)
        else:
            self.items = list(items)

    @property
    def values(self) -> list[Any] | deque[Any]:
        """The items (the name the other series use)."""
        return self.items

    def __len__(self) -> int:
        return len(self.items)

    def push(self, item: Any) -> None:
        """Append ``item`` (the oldest goes once the window is full)."""
        self._check_pushable()
        self.items.append(_check_item(item, what="ItemSeriesStats"))

    def merge(self, incoming_stats: Sequence[StatsBase]) -> None:
        """Append the items of ``incoming_stats``, in order."""
        if self.is_leaf:
            raise ValueError("ItemSeriesStats is merged into only at aggregation stages (is_leaf=False).")
        merged = [item for s in incoming_stats for item in s.items]  # type: ignore[attr-defined]
        self.items = [*self.items, *merged]
        self.latest_merged = merged

    def peek(self, compile: bool = True, latest_merged_only: bool = False) -> Any:
        """The items (NaN when there are none and ``compile=True``, as RLlib's)."""
        self._check_latest_merged_only(latest_merged_only)
        items = list(self.items) if not latest_merged_only else self.latest_merged
        if items is None:
            return math.nan if compile else []
        return math.nan if compile and not items else list(items)

    def reduce(self, compile: bool = True) -> Any:
        """The items; the stat starts empty."""
        items = list(self.items)
        self._set_items([])
        if compile:
            return items
        out = self.clone()
        assert isinstance(out, ItemSeriesStats)
        out._set_items(items)
        return out

    def _init_kwargs(self) -> dict[str, Any]:
        return {**super()._init_kwargs(), "window": self._window}

    @classmethod
    def _init_kwargs_from_state(cls, state: Mapping[str, Any]) -> dict[str, Any]:
        return {**super()._init_kwargs_from_state(state), "window": _check_window(state["window"], allow_inf=False)}

    def _read_latest_merged(self, value: Any) -> Any:
        if value is None:
            return None
        if not isinstance(value, list | tuple):
            raise TypeError(f"latest_merged is a list, got a {type(value).__name__}")
        return [_check_item(v, what="latest_merged") for v in value]

    def get_state(self) -> dict[str, Any]:
        return {**super().get_state(), "items": list(self.items), "window": self._window}

    def set_state(self, state: Mapping[str, Any]) -> None:
        super().set_state(state)
        self._window = _check_window(state["window"], allow_inf=False)
        items = state["items"]
        if not isinstance(items, list | tuple):
            raise TypeError(f"items is a list, got a {type(items).__name__}")
        if self.is_leaf and self._window is not None and len(items) > self._window:
            raise ValueError(f"{len(items)} items for a window of {self._window}")
        self._set_items(_check_item(v, what="items") for v in items)

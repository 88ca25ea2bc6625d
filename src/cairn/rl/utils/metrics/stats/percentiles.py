"""RLlib's :class:`PercentilesStats`: percentiles of the last ``window`` values."""

from __future__ import annotations

import numbers
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from cairn.rl.utils.metrics.stats.base import StatsBase, _check_window, _is_nan, _numbers, check_number, to_cpu

__all__ = ["DEFAULT_PERCENTILES", "PercentilesStats", "compute_percentiles"]


DEFAULT_PERCENTILES: tuple[int, ...] = (0, 50, 75, 90, 95, 99, 100)
"""The percentiles :class:`PercentilesStats` reports without a list (RLlib's default)."""


def compute_percentiles(sorted_values: Sequence[Any], percentiles: Sequence[float]) -> dict[Any, Any]:
    """Percentile -> value of the sorted ``sorted_values``, interpolated linearly (numpy's ``"linear"``).

    ``None`` for each percentile when there are no values (as RLlib reports).
    """
    n = len(sorted_values)
    out: dict[Any, Any] = {}
    for p in percentiles:
        if n == 0:
            out[p] = None
            continue
        index = p / 100 * (n - 1)
        low = int(index)
        weight = index - low
        out[p] = (
            sorted_values[low] if weight == 0 else sorted_values[low] * (1 - weight) + sorted_values[low + 1] * weight
        )
    return out


class PercentilesStats(StatsBase):
    """Percentiles of the last ``window`` values (RLlib's ``PercentilesStats``).

    Args:
        percentiles: The percentiles (numbers in [0, 100]); ``None`` or ``True``: RLlib's default
            :data:`DEFAULT_PERCENTILES`.
        window: How many values a leaf keeps.
    """

    stats_cls_identifier = "percentiles"

    def __init__(
        self,
        percentiles: Sequence[float] | bool | None = None,
        window: int | float | None = None,
        is_root: bool = False,
        is_leaf: bool = True,
    ) -> None:
        super().__init__(is_root=is_root, is_leaf=is_leaf)
        self._window = _check_window(window)
        self._percentiles = _check_percentiles(percentiles)
        self.values: list[Any] | deque[Any] = []
        self._set_values([])

    def _set_values(self, values: Iterable[Any]) -> None:
        if self._window is not None and self.is_leaf:
            self.values = deque(values, maxlen=self._window)
        else:
            self.values = list(values)

    def __len__(self) -> int:
        return len(self.values)

    def __float__(self) -> float:
        raise ValueError("Percentiles are not reduced to a single value; they have no float value.")

    def __eq__(self, other: object) -> bool:
        raise NotImplementedError("Percentiles do not compare as numbers.")

    __hash__ = None

    def __format__(self, fmt: str) -> str:
        raise ValueError("Percentiles are not reduced to a single value; format peek() instead.")

    def push(self, value: Any) -> None:
        """Append ``value`` (NaN is refused: it has no rank)."""
        self._check_pushable()
        value = check_number(value, what="PercentilesStats")
        if _is_nan(value):
            raise ValueError("NaN values are not allowed in PercentilesStats.")
        self.values.append(value)

    def merge(self, incoming_stats: Sequence[StatsBase]) -> None:
        """Append the values of ``incoming_stats`` (same percentiles and window)."""
        if self.is_leaf:
            raise ValueError("PercentilesStats is merged into only at aggregation stages (is_leaf=False).")
        for s in incoming_stats:
            if s._percentiles != self._percentiles or s._window != self._window:  # type: ignore[attr-defined]
                raise ValueError("All merged PercentilesStats must have the same percentiles and window.")
        merged = [v for s in incoming_stats for v in s.values]  # type: ignore[attr-defined]
        self.values = [*self.values, *merged]
        self.latest_merged = merged

    def peek(self, compile: bool = True, latest_merged_only: bool = False) -> Any:
        """Percentile -> value (``compile=False``: the sorted values)."""
        self._check_latest_merged_only(latest_merged_only)
        if latest_merged_only and self.latest_merged is None:
            return {p: None for p in self._percentiles} if compile else []
        values = sorted(_numbers(self.latest_merged if latest_merged_only else self.values))
        return compute_percentiles(values, self._percentiles) if compile else values

    def reduce(self, compile: bool = True) -> Any:
        """The percentiles (``compile=False``: a stat holding the sorted values); clears the values."""
        values = sorted(_numbers(self.values))
        self._set_values([])
        if compile:
            return compute_percentiles(values, self._percentiles)
        out = self.clone()
        assert isinstance(out, PercentilesStats)
        out.values = values
        return out

    def _init_kwargs(self) -> dict[str, Any]:
        return {**super()._init_kwargs(), "percentiles": list(self._percentiles), "window": self._window}

    @classmethod
    def _init_kwargs_from_state(cls, state: Mapping[str, Any]) -> dict[str, Any]:
        return {
            **super()._init_kwargs_from_state(state),
            "percentiles": state["percentiles"],
            "window": _check_window(state["window"], allow_inf=False),
        }

    def get_state(self) -> dict[str, Any]:
        return {
            **super().get_state(),
            "values": _numbers(self.values),
            "window": self._window,
            "percentiles": list(self._percentiles),
        }

    def set_state(self, state: Mapping[str, Any]) -> None:
        super().set_state(state)
        self._window = _check_window(state["window"], allow_inf=False)
        self._percentiles = _check_percentiles(state["percentiles"])
        values = state["values"]
        if not isinstance(values, list | tuple):
            raise TypeError(f"values is a list, got a {type(values).__name__}")
        if self.is_leaf and self._window is not None and len(values) > self._window:
            raise ValueError(f"{len(values)} values for a window of {self._window}")
        self._set_values(to_cpu(check_number(v, what="values")) for v in values)


def _is_percentile(p: Any) -> bool:
    return not isinstance(p, bool) and isinstance(p, numbers.Real) and 0 <= float(p) <= 100


def _check_percentiles(percentiles: Any) -> list[Any]:
    if percentiles is None or percentiles is True:
        return list(DEFAULT_PERCENTILES)
    if not isinstance(percentiles, list | tuple) or not percentiles or not all(_is_percentile(p) for p in percentiles):
        raise ValueError(f"percentiles must be None, True or a list of numbers in [0, 100], got {percentiles!r:.80}.")
    return list(percentiles)

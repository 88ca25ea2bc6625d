"""Stats over a series of numbers: :class:`SeriesStats` and its mean, min, max and sum."""

from __future__ import annotations

import abc
import math
import time
import warnings
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, ClassVar

import numpy as np

from cairn.rl.utils.metrics.stats.base import StatsBase, _check_window, _flag, _numbers, _python, check_number

__all__ = ["MaxStats", "MeanStats", "MinStats", "SeriesStats", "SumStats"]


class SeriesStats(StatsBase):
    """A series of numbers reduced by one function (RLlib's ``SeriesStats``): mean, min, max, sum.

    With a ``window``, a leaf keeps its last ``window`` values; without one, it keeps one running
    value (:class:`MeanStats` keeps every value since the last reduce). An aggregation stat
    keeps the values merged into it until its next reduce.
    """

    _keeps_every_value: ClassVar[bool] = False
    """Without a window, a leaf keeps every value since the last reduce (a mean), not one running value."""

    def __init__(self, window: int | float | None = None, is_root: bool = False, is_leaf: bool = True) -> None:
        super().__init__(is_root=is_root, is_leaf=is_leaf)
        self._window = _check_window(window)
        self.values: list[Any] | deque[Any] = []
        self._set_values([])

    def _set_values(self, new_values: Iterable[Any]) -> None:
        # A leaf keeps at most `window` values; an aggregation stat keeps all it was given this cycle.
        if self._window is not None and self.is_leaf:
            self.values = deque(new_values, maxlen=self._window)
        else:
            self.values = list(new_values)

    def __len__(self) -> int:
        return len(self.values)

    def _init_kwargs(self) -> dict[str, Any]:
        return {**super()._init_kwargs(), "window": self._window}

    @classmethod
    def _init_kwargs_from_state(cls, state: Mapping[str, Any]) -> dict[str, Any]:
        return {**super()._init_kwargs_from_state(state), "window": _check_window(state["window"], allow_inf=False)}

    def get_state(self) -> dict[str, Any]:
        return {**super().get_state(), "values": _numbers(self.values), "window": self._window}

    def set_state(self, state: Mapping[str, Any]) -> None:
        super().set_state(state)
        self._window = _check_window(state["window"], allow_inf=False)
        values = state["values"]
        if not isinstance(values, list | tuple):
            raise TypeError(f"values is a list, got a {type(values).__name__}")
        limit = self._window if self._window is not None else (None if self._keeps_every_value else 1)
        if self.is_leaf and limit is not None and len(values) > limit:
            raise ValueError(f"{len(values)} values for a leaf stat that keeps at most {limit}")
        self._set_values(check_number(v, what="values") for v in values)

    def push(self, value: Any) -> None:
        """Add ``value``: appended to the window, or folded into the running value."""
        self._check_pushable()
        value = check_number(value, what=type(self).__name__)
        if self._window is None and self.values:
            self._set_values(self.window_reduce([self.values[0], value]))
        else:
            self.values.append(value)

    def merge(self, incoming_stats: Sequence[StatsBase]) -> None:
        """Append the values of ``incoming_stats`` (their windows' reductions) to this cycle's."""
        if self.is_leaf:
            raise ValueError(f"{type(self).__name__} is merged into only at aggregation stages (is_leaf=False).")
        merged = [v for s in incoming_stats for v in s.values]  # type: ignore[attr-defined]
        if not incoming_stats:
            return
        self.values = [*self.values, *merged]
        self.latest_merged = merged

    @abc.abstractmethod
    def _reduce(self, values: np.ndarray[Any, Any]) -> Any:
        """The reduction of ``values`` (NaN left out)."""

    def window_reduce(self, values: Sequence[Any] | None = None) -> list[Any]:
        """``[reduction]`` of ``values`` (default: the stat's), NaN values left out; ``[nan]`` if none."""
        numbers_ = _numbers(self.values if values is None else values)
        if not numbers_ or all(isinstance(v, float) and math.isnan(v) for v in numbers_):
            return [math.nan]
        return [_python(self._reduce(np.asarray(numbers_)))]

    def peek(self, compile: bool = True, latest_merged_only: bool = False) -> Any:
        """The reduction of the values (``[it]`` with ``compile=False``); NaN when there are none."""
        self._check_latest_merged_only(latest_merged_only)
        if latest_merged_only:
            if self.latest_merged is None:
                return math.nan if compile else []
            reduced = self.window_reduce(self.latest_merged)
        elif len(self.values) == 1:
            reduced = _numbers(self.values)
        else:
            reduced = self.window_reduce()
        return reduced[0] if compile else reduced

    def reduce(self, compile: bool = True) -> Any:
        """The reduction (or, without a window and ``compile=False``, the values to reduce upstream)."""
        if self._window is None and (len(self.values) <= 1 or not compile):
            reduced = _numbers(self.values)
        else:
            reduced = self.window_reduce()
        self._set_values([])
        if compile:
            return reduced[0] if reduced else math.nan
        out = self.clone()
        assert isinstance(out, SeriesStats)
        out.values = reduced
        return out

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.peek()!r}; window={self._window}; len={len(self)})"


def _quiet(fn: Callable[[Any], Any]) -> Callable[[Any], Any]:
    def reduce(values: Any) -> Any:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            return fn(values)

    return reduce


class MeanStats(SeriesStats):
    """The mean of the last ``window`` values, or of all values since the last reduce (RLlib's ``MeanStats``).

    Merged, it is the mean of the parts' means (each part's reduction counts once).
    """

    stats_cls_identifier = "mean"

    def _reduce(self, values: np.ndarray[Any, Any]) -> Any:
        return _quiet(np.nanmean)(values)

    _keeps_every_value = True

    def push(self, value: Any) -> None:
        """Append ``value`` (a mean without a window keeps every value until the next reduce)."""
        self._check_pushable()
        self.values.append(check_number(value, what="MeanStats"))

    def reduce(self, compile: bool = True) -> Any:
        """The mean (``compile=False``: a stat holding it); clears the values."""
        reduced = self.window_reduce()
        self._set_values([])
        if compile:
            return reduced[0]
        out = self.clone()
        assert isinstance(out, SeriesStats)
        out.values = reduced
        return out


class MinStats(SeriesStats):
    """The min of the last ``window`` values, or a running min (RLlib's ``MinStats``)."""

    stats_cls_identifier = "min"

    def _reduce(self, values: np.ndarray[Any, Any]) -> Any:
        return _quiet(np.nanmin)(values)


class MaxStats(SeriesStats):
    """The max of the last ``window`` values, or a running max (RLlib's ``MaxStats``)."""

    stats_cls_identifier = "max"

    def _reduce(self, values: np.ndarray[Any, Any]) -> Any:
        return _quiet(np.nanmax)(values)


class SumStats(SeriesStats):
    """The sum since the last reduce, or of the last ``window`` values (RLlib's ``SumStats``).

    Args:
        with_throughput: Also report :attr:`throughputs`: the sum over the seconds since the last reduce.
    """

    stats_cls_identifier = "sum"

    def _reduce(self, values: np.ndarray[Any, Any]) -> Any:
        return np.nansum(values)

    def __init__(
        self,
        window: int | float | None = None,
        is_root: bool = False,
        is_leaf: bool = True,
        with_throughput: bool = False,
    ) -> None:
        super().__init__(window=window, is_root=is_root, is_leaf=is_leaf)
        self.track_throughput = bool(with_throughput)
        self._last_throughput_measure_time = time.perf_counter()

    @property
    def has_throughputs(self) -> bool:
        """Whether the stat reports :attr:`throughputs`."""
        return self.track_throughput

    def initialize_throughput_reference_time(self, time: float) -> None:
        """Measure the throughput from ``time`` (a root stat created by aggregation: the logger's start)."""
        self._last_throughput_measure_time = time

    @property
    def throughputs(self) -> float:
        """The sum per second since the last reduce (wall clock)."""
        if not self.track_throughput:
            raise ValueError("This SumStats does not track a throughput (with_throughput=False).")
        elapsed = time.perf_counter() - self._last_throughput_measure_time
        return float(self.peek(compile=True)) / elapsed if elapsed > 0 else math.nan

    def reduce(self, compile: bool = True) -> Any:
        """The sum (``compile=False``: a stat holding it); clears the values."""
        value = super().reduce(compile=True)
        if self.track_throughput:
            self._last_throughput_measure_time = time.perf_counter()
        if compile:
            return value
        out = self.clone()
        assert isinstance(out, SumStats)
        out.values = [value]
        return out

    def _init_kwargs(self) -> dict[str, Any]:
        return {**super()._init_kwargs(), "with_throughput": self.track_throughput}

    @classmethod
    def _init_kwargs_from_state(cls, state: Mapping[str, Any]) -> dict[str, Any]:
        return {**super()._init_kwargs_from_state(state), "with_throughput": _flag(state, "track_throughput")}

    def get_state(self) -> dict[str, Any]:
        return {**super().get_state(), "track_throughput": self.track_throughput}

    def set_state(self, state: Mapping[str, Any]) -> None:
        super().set_state(state)
        self.track_throughput = _flag(state, "track_throughput")

"""RLlib 2.60's ``Stats`` classes: one statistic each, logged at leaves and merged up a tree of loggers.

``from cairn.rl.utils.metrics.stats import MeanStats, EmaStats, ...`` works as
``from ray.rllib.utils.metrics.stats import ...`` does, with RLlib 2.60's semantics:

==================  ==============  ===========================================================
class               ``reduce=``     what :meth:`~StatsBase.peek` gives
==================  ==============  ===========================================================
:class:`MeanStats`  ``"mean"``      mean of the last ``window`` values (of all since the last
                                    reduce without a window); merged: mean of the parts' means
:class:`MinStats`   ``"min"``       min (windowed or running); merged: min of the parts
:class:`MaxStats`   ``"max"``       max (windowed or running); merged: max of the parts
:class:`SumStats`   ``"sum"``       sum since the last reduce (or of the last ``window``);
                                    optional throughput (sum / seconds since the last reduce)
:class:`LifetimeSumStats` ``"lifetime_sum"``  a sum that a *root* stat never clears; a
                                    non-root one hands its increment up and restarts at 0
:class:`EmaStats`   ``"ema"``       exponential moving average (``ema_coeff``, default 0.01);
                                    merged: mean of the parts' averages
:class:`PercentilesStats` ``"percentiles"``  percentile -> value of the last ``window`` values
:class:`ItemStats`  ``"item"``      the last item logged
:class:`ItemSeriesStats` ``"item_series"``  the last ``window`` items, as a list
==================  ==============  ===========================================================

Every stat is a *leaf* (values are pushed into it), an *aggregation* stat (``is_leaf=False``:
stats of parallel components are merged into it), or both at the root. ``reduce()`` returns the
reduced value (``compile=True``) or a stat holding it, for the next logger up to merge, and
starts a new cycle: everything is cleared except a root's lifetime sum.

cairn's additions: values are numbers (Python, numpy or 0-d torch; items may also be strings or
None), checked when pushed; :meth:`StatsBase.from_state` checks a state before building anything
(``ValueError``/``TypeError`` that :class:`~cairn.rl.utils.metrics.metrics_logger.MetricsLogger`
turns into :class:`~cairn.errors.IncompatibleCheckpointError`); integer sums stay ints.
"""

from __future__ import annotations

import abc
import math
import numbers
import threading
import time
import warnings
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, ClassVar

import numpy as np

from cairn.state_checks import Count

__all__ = [
    "DEFAULT_PERCENTILES",
    "EmaStats",
    "ItemSeriesStats",
    "ItemStats",
    "LifetimeSumStats",
    "MaxStats",
    "MeanStats",
    "MinStats",
    "PercentilesStats",
    "SeriesStats",
    "StatsBase",
    "SumStats",
    "compute_percentiles",
]

DEFAULT_PERCENTILES: tuple[int, ...] = (0, 50, 75, 90, 95, 99, 100)
"""The percentiles :class:`PercentilesStats` reports without a list (RLlib's default)."""

_MAX_WINDOW = 10_000_000
"""Bound on a window read from a state (a deque of that size is allocated)."""
_WINDOW = Count(1, _MAX_WINDOW)


def _is_tensor(value: Any) -> bool:
    # torch is optional for this module: a tensor is recognised by its type's module.
    return type(value).__module__.startswith("torch") and hasattr(value, "detach")


def to_cpu(value: Any) -> Any:
    """A Python scalar for a 0-d torch tensor or numpy scalar; other values unchanged."""
    if _is_tensor(value):
        return value.detach().cpu().item()
    if isinstance(value, np.generic):
        return value.item()
    return value


def _is_nan(value: Any) -> bool:
    value = to_cpu(value)
    return isinstance(value, float) and math.isnan(value)


def check_number(value: Any, *, what: str = "a statistic") -> Any:
    """``value`` if it is a number RLlib's numeric stats take (a Python, numpy or 0-d torch scalar).

    Tensors are detached (kept on their device until a reduce); bools count as ints.

    Raises:
        TypeError: Not a number (or a tensor with more than one element).
    """
    if _is_tensor(value):
        if value.numel() != 1:
            raise TypeError(f"{what}: a tensor value must hold one number, got shape {tuple(value.shape)}.")
        return value.detach()
    if isinstance(value, bool | np.bool_):
        return int(value)
    if isinstance(value, numbers.Real):
        return value.item() if isinstance(value, np.generic) else value
    raise TypeError(f"{what}: values are numbers (int, float, numpy or 0-d torch scalars), got {type(value).__name__}.")


def _check_item(value: Any, *, what: str) -> Any:
    """Items (``item``, ``item_series``) are numbers, strings or None: plain data a checkpoint holds."""
    if value is None or isinstance(value, str):
        return value
    return to_cpu(check_number(value, what=what))


def _numbers(values: Iterable[Any]) -> list[Any]:
    return [to_cpu(v) for v in values]


def _python(value: Any) -> Any:
    """numpy results as Python numbers (an int sum stays an int)."""
    return value.item() if isinstance(value, np.generic) else value


def _check_window(window: Any, *, allow_inf: bool = True) -> int | None:
    if window is None:
        return None
    if allow_inf and isinstance(window, float) and math.isinf(window) and window > 0:
        return None
    if not _WINDOW.fits(window):
        raise ValueError(f"window must be None or an int in [1, {_MAX_WINDOW}], got {window!r:.40}.")
    return int(window)


class StatsBase(abc.ABC):
    """One statistic (RLlib's ``StatsBase``): pushed to at a leaf, merged into at an aggregation stage.

    Args:
        is_root: The stat lives in the root logger (a lifetime sum is never cleared there).
        is_leaf: Values are pushed into it (``False``: it only merges other stats).
    """

    stats_cls_identifier: ClassVar[str]
    """The ``reduce=`` name of the class; recorded in its state."""

    def __init__(self, is_root: bool = False, is_leaf: bool = True) -> None:
        self.is_root = bool(is_root)
        self.is_leaf = bool(is_leaf)
        self.latest_merged: Any = None
        self._start_times: dict[int, float] = {}

    # ------------------------------------------------------------------ numbers and timing

    @property
    def has_throughputs(self) -> bool:
        """Whether the stat tracks a throughput (:class:`SumStats`, :class:`LifetimeSumStats`)."""
        return False

    @property
    def throughputs(self) -> Any:
        """The throughput(s) of a stat that tracks them (see :attr:`has_throughputs`)."""
        raise ValueError(f"{type(self).__name__} tracks no throughput.")

    def initialize_throughput_reference_time(self, time: float) -> None:
        """Measure throughputs from ``time`` (``time.perf_counter()``); stats with throughputs override it."""
        if self.has_throughputs:
            raise NotImplementedError(f"{type(self).__name__} tracks a throughput and must override this method.")

    @abc.abstractmethod
    def __len__(self) -> int:
        """How many values the stat holds."""

    def __float__(self) -> float:
        value = self.peek(compile=True)
        if isinstance(value, list | tuple | deque | dict):
            raise ValueError(f"{self!r} holds several values; it has no float value.")
        return float(value)

    def __int__(self) -> int:
        return int(float(self))

    def __eq__(self, other: object) -> bool:
        return float(self) == float(other)  # type: ignore[arg-type]

    __hash__ = None  # type: ignore[assignment]

    def __le__(self, other: Any) -> bool:
        return float(self) <= float(other)

    def __ge__(self, other: Any) -> bool:
        return float(self) >= float(other)

    def __lt__(self, other: Any) -> bool:
        return float(self) < float(other)

    def __gt__(self, other: Any) -> bool:
        return float(self) > float(other)

    def __add__(self, other: Any) -> float:
        return float(self) + float(other)

    def __sub__(self, other: Any) -> float:
        return float(self) - float(other)

    def __mul__(self, other: Any) -> float:
        return float(self) * float(other)

    def __format__(self, fmt: str) -> str:
        return f"{float(self):{fmt}}"

    def __enter__(self) -> StatsBase:
        """Start timing a ``with`` block (per thread); its seconds are pushed on exit."""
        self._start_times[threading.get_ident()] = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        start = self._start_times.pop(threading.get_ident())
        self.push(time.perf_counter() - start)

    # ------------------------------------------------------------------ construction and state

    def _init_kwargs(self) -> dict[str, Any]:
        """The constructor arguments that make a stat with the settings of this one."""
        return {"is_root": self.is_root, "is_leaf": self.is_leaf}

    @classmethod
    def _init_kwargs_from_state(cls, state: Mapping[str, Any]) -> dict[str, Any]:
        return {"is_root": _flag(state, "is_root"), "is_leaf": _flag(state, "is_leaf")}

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> StatsBase:
        """A stat of this class with ``state`` (from :meth:`get_state`), checked first.

        Raises:
            ValueError: ``state`` is not a state of this class.
            TypeError: A value in ``state`` has the wrong type.
        """
        if not isinstance(state, Mapping):
            raise TypeError(f"a stat's state is a dict, got a {type(state).__name__}")
        if state.get("stats_cls_identifier") != cls.stats_cls_identifier:
            raise ValueError(
                f"state of a {state.get('stats_cls_identifier')!r:.40} stat given to {cls.__name__} "
                f"({cls.stats_cls_identifier!r})"
            )
        stats = cls(**cls._init_kwargs_from_state(state))
        stats.set_state(state)
        return stats

    def clone(self, init_overrides: Mapping[str, Any] | None = None) -> StatsBase:
        """A new, empty stat with the settings of this one (``init_overrides`` change some)."""
        kwargs = self._init_kwargs()
        kwargs.update(init_overrides or {})
        return type(self)(**kwargs)

    def get_state(self) -> dict[str, Any]:
        """The stat as plain data (settings and values on the CPU)."""
        state: dict[str, Any] = {
            "stats_cls_identifier": self.stats_cls_identifier,
            "is_root": self.is_root,
            "is_leaf": self.is_leaf,
        }
        if not self.is_leaf:
            state["latest_merged"] = _plain(self.latest_merged)
        return state

    def set_state(self, state: Mapping[str, Any]) -> None:
        """Take the values of ``state`` (settings are the constructor's: see :meth:`from_state`)."""
        if state.get("stats_cls_identifier") != self.stats_cls_identifier:
            raise ValueError(
                f"state of a {state.get('stats_cls_identifier')!r:.40} stat, not {self.stats_cls_identifier!r}"
            )
        self.is_root = _flag(state, "is_root")
        self.is_leaf = _flag(state, "is_leaf")
        if not self.is_leaf:
            self.latest_merged = self._read_latest_merged(state.get("latest_merged"))

    def _read_latest_merged(self, value: Any) -> Any:
        if value is None:
            return None
        if not isinstance(value, list | tuple):
            raise TypeError(f"latest_merged is a list, got a {type(value).__name__}")
        return [check_number(v, what="latest_merged") for v in value]

    # ------------------------------------------------------------------ the protocol

    def _check_pushable(self) -> None:
        if not self.is_leaf:
            raise ValueError(
                f"Cannot push values to {type(self).__name__} that aggregates other components' stats "
                "(is_leaf=False): it changes only through merge(). Log under another key."
            )

    def _check_latest_merged_only(self, latest_merged_only: bool) -> None:
        if latest_merged_only and self.is_leaf:
            raise ValueError("latest_merged_only can only be used on aggregation stats objects (is_leaf=False).")

    @abc.abstractmethod
    def push(self, value: Any) -> None:
        """Add ``value`` (at a leaf)."""

    @abc.abstractmethod
    def merge(self, incoming_stats: Sequence[StatsBase]) -> None:
        """Merge the stats of parallel components (at an aggregation stage) into this one."""

    @abc.abstractmethod
    def peek(self, compile: bool = True, latest_merged_only: bool = False) -> Any:
        """The reduced value, without changing anything (``compile=False``: as a list).

        ``latest_merged_only``: only what the latest :meth:`merge` brought (aggregation stats).
        """

    @abc.abstractmethod
    def reduce(self, compile: bool = True) -> Any:
        """The reduced value (``compile=False``: a stat holding it, to merge upstream); starts a new cycle."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.peek()!r}; len={len(self)})"


def _flag(state: Mapping[str, Any], name: str) -> bool:
    value = state[name]
    if not isinstance(value, bool):
        raise TypeError(f"{name} is a bool, got {value!r:.40}")
    return value


def _plain(value: Any) -> Any:
    if isinstance(value, list | tuple | deque):
        return _numbers(value)
    return to_cpu(value)


# ---------------------------------------------------------------------- series of numbers


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


# ---------------------------------------------------------------------- single running values


class LifetimeSumStats(StatsBase):
    """A sum over the whole run (RLlib's ``LifetimeSumStats``).

    A root stat never clears its sum; any other hands its increment up at each reduce and
    restarts at 0, so the root's sum counts every value exactly once, whatever the number of
    parallel components. The sum of ints stays an int.

    Args:
        with_throughput: Also report :attr:`throughputs` (per second since the last reduce and,
            at the root, since the last restore).
    """

    stats_cls_identifier = "lifetime_sum"

    def __init__(self, with_throughput: bool = False, is_root: bool = False, is_leaf: bool = True) -> None:
        super().__init__(is_root=is_root, is_leaf=is_leaf)
        self._lifetime_sum: Any = 0
        self.track_throughputs = bool(with_throughput)
        self._value_at_last_reduce: Any = 0
        self._value_at_last_restore: Any = 0
        now = time.perf_counter()
        self._last_reduce_time = now
        self._last_restore_time = now

    @property
    def has_throughputs(self) -> bool:
        """Whether the stat reports :attr:`throughputs`."""
        return self.track_throughputs

    def initialize_throughput_reference_time(self, time: float) -> None:
        """Measure the throughputs from ``time`` (a root stat created by aggregation: the logger's start)."""
        self._last_reduce_time = time
        self._last_restore_time = time

    @property
    def throughputs(self) -> dict[str, float]:
        """``throughput_since_last_reduce`` and (at the root) ``throughput_since_last_restore``, per second."""
        if not self.track_throughputs:
            raise ValueError("This LifetimeSumStats does not track a throughput (with_throughput=False).")
        out = {"throughput_since_last_reduce": self.throughput_since_last_reduce}
        if self.is_root:
            out["throughput_since_last_restore"] = self.throughput_since_last_restore
        return out

    @property
    def throughput_since_last_reduce(self) -> float:
        """The increase per second since the last reduce (wall clock)."""
        return _rate(to_cpu(self._lifetime_sum) - self._value_at_last_reduce, self._last_reduce_time)

    @property
    def throughput_since_last_restore(self) -> float:
        """The increase per second since the stat was created or restored (root stats only)."""
        if not self.is_root:
            raise ValueError("throughput_since_last_restore is only available for root stats.")
        return _rate(to_cpu(self._lifetime_sum) - self._value_at_last_restore, self._last_restore_time)

    def __len__(self) -> int:
        return 1

    def push(self, value: Any) -> None:
        """Add ``value`` (NaN is ignored)."""
        self._check_pushable()
        value = to_cpu(check_number(value, what="LifetimeSumStats"))
        if not _is_nan(value):
            self._lifetime_sum += value

    def merge(self, incoming_stats: Sequence[StatsBase]) -> None:
        """Add the increments of ``incoming_stats``."""
        if self.is_leaf:
            raise ValueError("LifetimeSumStats is merged into only at aggregation stages (is_leaf=False).")
        incoming = sum((to_cpu(s._lifetime_sum) for s in incoming_stats), 0)  # type: ignore[attr-defined]
        self._lifetime_sum += incoming
        self.latest_merged = incoming

    def peek(self, compile: bool = True, latest_merged_only: bool = False) -> Any:
        """The sum (``latest_merged_only``: what the latest merge added)."""
        self._check_latest_merged_only(latest_merged_only)
        if latest_merged_only:
            value = 0 if self.latest_merged is None else self.latest_merged
        else:
            value = to_cpu(self._lifetime_sum)
        return value if compile else [value]

    def reduce(self, compile: bool = True) -> Any:
        """The sum; a non-root stat restarts at 0 (it handed its increment up)."""
        value = to_cpu(self._lifetime_sum)
        if self.is_root:
            self._value_at_last_reduce = value
        else:
            self._lifetime_sum = 0
            self._value_at_last_reduce = 0
        self._last_reduce_time = time.perf_counter()
        if compile:
            return value
        out = self.clone()
        assert isinstance(out, LifetimeSumStats)
        out._lifetime_sum = value
        return out

    def _init_kwargs(self) -> dict[str, Any]:
        return {**super()._init_kwargs(), "with_throughput": self.track_throughputs}

    @classmethod
    def _init_kwargs_from_state(cls, state: Mapping[str, Any]) -> dict[str, Any]:
        return {**super()._init_kwargs_from_state(state), "with_throughput": _flag(state, "track_throughputs")}

    def _read_latest_merged(self, value: Any) -> Any:
        return None if value is None else to_cpu(check_number(value, what="latest_merged"))

    def get_state(self) -> dict[str, Any]:
        return {
            **super().get_state(),
            "lifetime_sum": to_cpu(self._lifetime_sum),
            "track_throughputs": self.track_throughputs,
        }

    def set_state(self, state: Mapping[str, Any]) -> None:
        super().set_state(state)
        self._lifetime_sum = to_cpu(check_number(state["lifetime_sum"], what="lifetime_sum"))
        self.track_throughputs = _flag(state, "track_throughputs")
        # Throughputs start over after a restore.
        self._value_at_last_restore = self._value_at_last_reduce = self._lifetime_sum


def _rate(delta: float, since: float) -> float:
    elapsed = time.perf_counter() - since
    return float(delta) / elapsed if elapsed > 0 else math.nan


class EmaStats(StatsBase):
    """An exponential moving average (RLlib's ``EmaStats``): ``ema = (1 - c) * ema + c * value``.

    The first value starts it; NaN values are ignored. Merged, it is the mean of the parts' averages.

    Args:
        ema_coeff: ``c``, in (0, 1]; 0.01 by default, as RLlib's.
    """

    stats_cls_identifier = "ema"

    def __init__(self, ema_coeff: float = 0.01, is_root: bool = False, is_leaf: bool = True) -> None:
        super().__init__(is_root=is_root, is_leaf=is_leaf)
        self._ema_coeff = _check_ema_coeff(ema_coeff)
        self._value: Any = math.nan
        self._values_to_merge: list[Any] = []

    def __len__(self) -> int:
        return 1

    def push(self, value: Any) -> None:
        """Fold ``value`` into the average."""
        self._check_pushable()
        value = to_cpu(check_number(value, what="EmaStats"))
        if _is_nan(value):
            return
        if _is_nan(self._value):
            self._value = value
        else:
            self._value = self._ema_coeff * value + (1.0 - self._ema_coeff) * self._value

    def merge(self, incoming_stats: Sequence[StatsBase]) -> None:
        """Collect the parts' averages (their mean is this stat's value until the next reduce)."""
        if self.is_leaf:
            raise ValueError("EmaStats is merged into only at aggregation stages (is_leaf=False).")
        values = [to_cpu(s._value) for s in incoming_stats]  # type: ignore[attr-defined]
        if not values:
            return
        self._values_to_merge.extend(values)
        self.latest_merged = values

    def peek(self, compile: bool = True, latest_merged_only: bool = False) -> Any:
        """The average (merged: the mean of the parts' averages)."""
        self._check_latest_merged_only(latest_merged_only)
        if latest_merged_only:
            value = math.nan if not self.latest_merged else _nan_mean(self.latest_merged)
        elif self._values_to_merge:
            value = _nan_mean(self._values_to_merge)
        else:
            value = self._value
        return value if compile else [value]

    def reduce(self, compile: bool = True) -> Any:
        """The average; the stat starts empty."""
        value = _nan_mean(self._values_to_merge) if self._values_to_merge else self._value
        self._values_to_merge = []
        self._value = math.nan
        if compile:
            return value
        out = self.clone()
        assert isinstance(out, EmaStats)
        out._value = value
        return out

    def _init_kwargs(self) -> dict[str, Any]:
        return {**super()._init_kwargs(), "ema_coeff": self._ema_coeff}

    @classmethod
    def _init_kwargs_from_state(cls, state: Mapping[str, Any]) -> dict[str, Any]:
        return {**super()._init_kwargs_from_state(state), "ema_coeff": state["ema_coeff"]}

    def get_state(self) -> dict[str, Any]:
        state = {**super().get_state(), "ema_coeff": self._ema_coeff, "value": to_cpu(self._value)}
        if not self.is_leaf:
            state["values_to_merge"] = list(self._values_to_merge)
        return state

    def set_state(self, state: Mapping[str, Any]) -> None:
        super().set_state(state)
        self._ema_coeff = _check_ema_coeff(state["ema_coeff"])
        self._value = to_cpu(check_number(state["value"], what="value"))
        pending = state.get("values_to_merge", [])
        if not isinstance(pending, list | tuple) or (pending and self.is_leaf):
            raise ValueError("values_to_merge is a list, held only by aggregation stats")
        self._values_to_merge = [to_cpu(check_number(v, what="values_to_merge")) for v in pending]

    def __repr__(self) -> str:
        return f"EmaStats({self.peek()!r}; ema_coeff={self._ema_coeff}; to_merge={len(self._values_to_merge)})"


def _check_ema_coeff(coeff: Any) -> float:
    if isinstance(coeff, bool) or not isinstance(coeff, numbers.Real) or not 0.0 < float(coeff) <= 1.0:
        raise ValueError(f"ema_coeff must be a number in (0, 1], got {coeff!r:.40}.")
    return float(coeff)


def _nan_mean(values: Sequence[Any]) -> Any:
    numbers_ = [v for v in _numbers(values) if not (isinstance(v, float) and math.isnan(v))]
    return math.nan if not numbers_ else _python(np.mean(np.asarray(numbers_, dtype=float)))


# ---------------------------------------------------------------------- items and percentiles


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

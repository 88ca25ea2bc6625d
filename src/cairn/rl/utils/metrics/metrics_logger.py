"""MetricsLogger: named statistics that callbacks log, reduce each iteration, and checkpoint.

It mirrors RLlib's ``ray.rllib.utils.metrics.metrics_logger.MetricsLogger``
(``log_value``, ``log_dict``, ``peek``, ``reduce``, ``aggregate``), simplified:

- A key is a ``"/"``-separated string (``"env_runners/num_long_episodes"``) or a
  tuple of strings (``("env_runners", "num_long_episodes")``); both name the same
  statistic. ``peek`` of a prefix returns the nested dict below it.
- Each statistic keeps its own way to reduce, fixed by the first ``log_value``
  (RLlib's ``Stats`` semantics): ``"sum"``, ``"min"``, ``"max"`` over all values
  (``window=None``) or over the last ``window`` values; ``"mean"`` over the last
  ``window`` values, or, with ``window=None``, an exponential moving average
  with ``ema_coeff`` (default 0.01, as in RLlib); ``reduce=None``: the list of
  the values (the last ``window`` ones, or all since the last clearing
  :meth:`reduce` with ``clear_on_reduce=True``), or with ``percentiles`` (``True``:
  RLlib's 0, 50, 75, 90, 95, 99, 100; or a list) a dict percentile -> value,
  linearly interpolated between the sorted values. :meth:`log_time` times a
  ``with`` block (seconds; an EMA by default). No throughput statistics, no
  ``reduce_per_index_on_aggregate``.
- ``reduce()`` returns the reduced values and clears the statistics logged with
  ``clear_on_reduce=True`` (per-iteration values); the others go on
  (``clear_on_reduce=False`` with ``reduce="sum"`` is a lifetime sum).
- Aggregation (RLlib: env runners' metrics reduced into the algorithm's logger
  each iteration): :meth:`pop_deltas` on the logger of an env runner hands over
  what was logged since the previous call (for sums, min and max: one value
  already reduced; for windows, the last ``window`` values; for moving averages,
  every value; for lists, the values logged since), and :meth:`aggregate` on the
  algorithm's logger logs them again, in runner order: sums add up, min and max
  combine, windows take the runners' values in order, lists are concatenated. A
  lifetime sum at the algorithm is thus the sum over all runners, whatever
  their number, and the result is deterministic.

The logger is checkpoint state (:meth:`get_state` / :meth:`set_state`): the
algorithm's logger lives in the algorithm's state, each env runner's in its
own, so lifetime sums and windows continue exactly across a checkpoint.
"""

from __future__ import annotations

import contextlib
import math
import numbers
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from cairn.errors import IncompatibleCheckpointError

__all__ = ["MetricsLogger", "Reduce", "flatten_metrics", "read_state"]

_MISSING: Any = object()

Reduce = Literal["mean", "sum", "min", "max"] | None
"""How a statistic reduces its values (``None``: it keeps them as a list)."""

_REDUCES: tuple[str | None, ...] = ("mean", "sum", "min", "max", None)
DEFAULT_EMA_COEFF = 0.01
"""RLlib's default coefficient of the moving average of a ``mean`` without a window."""

DEFAULT_PERCENTILES: tuple[int, ...] = (0, 50, 75, 90, 95, 99, 100)
"""The percentiles ``percentiles=True`` reports (RLlib's default)."""

Number = int | float
Key = str | Sequence[str]


def _split(key: Key) -> tuple[str, ...]:
    """``"a/b"`` or ``("a", "b")`` -> ``("a", "b")``; refuse empty parts."""
    parts = tuple(key.split("/")) if isinstance(key, str) else tuple(key)
    if not parts or any(not isinstance(p, str) or not p or "/" in p for p in parts):
        raise ValueError(
            f"A metric key is a '/'-separated string or a tuple of non-empty strings without '/', got {key!r}."
        )
    return parts


def _number(value: Any, key: tuple[str, ...]) -> Number:
    """A plain int (for ints and bools, so that counts stay exact) or float."""
    if isinstance(value, bool | numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    item = getattr(value, "item", None)  # numpy and torch scalars
    if callable(item):
        return _number(item(), key)
    raise TypeError(f"Metric {'/'.join(key)!r}: values are numbers, got {type(value).__name__}.")


def percentile_values(values: Sequence[Number], percentiles: Sequence[int]) -> dict[int, Number | None]:
    """Percentile -> value of ``values``, interpolated linearly between the sorted values (numpy's
    ``"linear"`` method); ``None`` for each when there are no values (as RLlib reports)."""
    ordered = sorted(values)
    out: dict[int, Number | None] = {}
    for p in percentiles:
        if not ordered:
            out[p] = None
            continue
        index = p / 100 * (len(ordered) - 1)
        low = int(index)
        weight = index - low
        out[p] = ordered[low] if weight == 0 else ordered[low] * (1 - weight) + ordered[low + 1] * weight
    return out


@dataclass
class _Stat:
    """One statistic: how it reduces and the values it keeps (at most ``window``, one, or a list)."""

    reduce: str | None
    window: int | None
    clear_on_reduce: bool
    ema_coeff: float | None
    values: list[Number] = field(default_factory=list)
    percentiles: tuple[int, ...] | None = None

    def push(self, value: Number) -> None:
        if self.window is not None:
            self.values.append(value)
            del self.values[: -self.window]
        elif not self.values or self.reduce is None:
            self.values.append(value)
        elif self.reduce == "sum":
            self.values[0] += value
        elif self.reduce == "min":
            self.values[0] = min(self.values[0], value)
        elif self.reduce == "max":
            self.values[0] = max(self.values[0], value)
        else:  # mean without a window: moving average
            coeff = self.ema_coeff if self.ema_coeff is not None else DEFAULT_EMA_COEFF
            self.values[0] = (1.0 - coeff) * self.values[0] + coeff * value

    def peek(self) -> Any:
        if self.reduce is None:
            if self.percentiles is not None:
                return percentile_values(self.values, self.percentiles)
            return list(self.values)
        if not self.values:
            return 0 if self.reduce == "sum" else math.nan
        if self.reduce == "sum":
            return sum(self.values)
        if self.reduce == "min":
            return min(self.values)
        if self.reduce == "max":
            return max(self.values)
        return sum(self.values) / len(self.values)

    def empty_like(self) -> _Stat:
        return _Stat(self.reduce, self.window, self.clear_on_reduce, self.ema_coeff, percentiles=self.percentiles)

    def record(self, key: tuple[str, ...]) -> dict[str, Any]:
        """The plain-data record of this statistic (a checkpoint's, or a delta handed to another logger)."""
        return {
            "key": list(key),
            "reduce": self.reduce,
            "window": self.window,
            "ema_coeff": self.ema_coeff,
            "clear_on_reduce": self.clear_on_reduce,
            "percentiles": None if self.percentiles is None else list(self.percentiles),
            "values": list(self.values),
        }


class MetricsLogger:
    """Named statistics (RLlib's ``MetricsLogger``, simplified as the module docstring says).

    Example::

        metrics.log_value("num_long_episodes", 1, reduce="sum")           # a lifetime sum
        metrics.log_value("episode_return", ret, reduce="mean", window=10)
        metrics.peek("num_long_episodes")
    """

    def __init__(self) -> None:
        self._stats: dict[tuple[str, ...], _Stat] = {}
        # What was logged since the last pop_deltas (same settings, own values).
        self._deltas: dict[tuple[str, ...], _Stat] = {}

    def log_value(
        self,
        key: Key,
        value: Any,
        *,
        reduce: Reduce = "mean",
        window: int | None = None,
        ema_coeff: float | None = None,
        clear_on_reduce: bool = False,
        percentiles: bool | Sequence[int] = False,
    ) -> None:
        """Log ``value`` under ``key``.

        The first call for a key fixes how it reduces; later calls must give the
        same settings (or the defaults of ``window``, ``ema_coeff``,
        ``clear_on_reduce`` and ``percentiles``, which then keep the recorded ones).

        Args:
            key: ``"a/b"`` or ``("a", "b")``.
            value: A number (int, float, bool, numpy or 0-d torch scalar).
            reduce: ``"mean"``, ``"sum"``, ``"min"``, ``"max"``, or ``None`` (keep the
                values: :meth:`peek` returns their list).
            window: Reduce over (or keep) the last ``window`` values only; ``None``: all
                of them (a moving average for ``"mean"``).
            ema_coeff: Coefficient of the moving average (``"mean"``, ``window=None``).
            clear_on_reduce: Forget the values at each :meth:`reduce` (per-iteration
                metrics). ``False`` with ``"sum"`` is a lifetime sum.
            percentiles: With ``reduce=None``: report percentile -> value instead of
                the list; ``True`` for RLlib's :data:`DEFAULT_PERCENTILES`, or a list
                of ints in [0, 100].

        Raises:
            ValueError: A bad setting, or settings that differ from the key's.
            TypeError: ``value`` is not a number.
        """
        parts = _split(key)
        kept = _check_settings(parts, reduce, window, ema_coeff, percentiles)
        number = _number(value, parts)
        stat = self._stats.get(parts)
        if stat is None:
            self._check_no_clash(parts)
            stat = _Stat(reduce, window, bool(clear_on_reduce), ema_coeff, percentiles=kept)
            self._stats[parts] = stat
        elif reduce != stat.reduce or (window, ema_coeff, clear_on_reduce, kept) not in (
            (stat.window, stat.ema_coeff, stat.clear_on_reduce, stat.percentiles),
            (None, None, False, None),
        ):
            raise ValueError(
                f"Metric {'/'.join(parts)!r} was first logged with reduce={stat.reduce!r}, window={stat.window}, "
                f"ema_coeff={stat.ema_coeff}, clear_on_reduce={stat.clear_on_reduce}, percentiles="
                f"{stat.percentiles}; log it the same way (or under another key)."
            )
        stat.push(number)
        delta = self._deltas.get(parts)
        if delta is None:
            delta = self._deltas[parts] = stat.empty_like()
        if stat.reduce == "mean" and stat.window is None:
            delta.values.append(number)  # a moving average cannot be pre-reduced: hand over every value
        else:
            delta.push(number)

    @contextlib.contextmanager
    def log_time(
        self,
        key: Key,
        *,
        reduce: Reduce = "mean",
        window: int | None = None,
        ema_coeff: float | None = None,
        clear_on_reduce: bool = False,
        percentiles: bool | Sequence[int] = False,
    ) -> Iterator[None]:
        """Time the ``with`` block and log its seconds under ``key`` (RLlib's ``log_time``), as :meth:`log_value`.

        The settings are checked before the block runs. The logged seconds are
        wall-clock measurements: a resumed run restores the statistic exactly
        (an EMA's value, a window's values), but new measurements differ from run to run.

        Example::

            with metrics.log_time("timers/my_step"):   # an EMA of the durations
                do_something()
        """
        _check_settings(_split(key), reduce, window, ema_coeff, percentiles)
        start = time.perf_counter()
        yield
        self.log_value(
            key,
            time.perf_counter() - start,
            reduce=reduce,
            window=window,
            ema_coeff=ema_coeff,
            clear_on_reduce=clear_on_reduce,
            percentiles=percentiles,
        )

    def _check_no_clash(self, parts: tuple[str, ...]) -> None:
        for existing in self._stats:
            shorter = min(len(existing), len(parts))
            if existing[:shorter] == parts[:shorter]:
                raise ValueError(
                    f"Metric {'/'.join(parts)!r} clashes with {'/'.join(existing)!r}: a key is either a value or "
                    "a group of values."
                )

    def log_dict(
        self,
        values: Mapping[str, Any],
        *,
        key: Key | None = None,
        reduce: Reduce = "mean",
        window: int | None = None,
        ema_coeff: float | None = None,
        clear_on_reduce: bool = False,
        percentiles: bool | Sequence[int] = False,
    ) -> None:
        """Log every leaf of the nested dict ``values`` (under ``key``, if given), as :meth:`log_value`."""
        prefix = _split(key) if key is not None else ()
        for name, value in values.items():
            if isinstance(value, Mapping):
                self.log_dict(
                    value,
                    key=(*prefix, name),
                    reduce=reduce,
                    window=window,
                    ema_coeff=ema_coeff,
                    clear_on_reduce=clear_on_reduce,
                    percentiles=percentiles,
                )
            else:
                self.log_value(
                    (*prefix, name),
                    value,
                    reduce=reduce,
                    window=window,
                    ema_coeff=ema_coeff,
                    clear_on_reduce=clear_on_reduce,
                    percentiles=percentiles,
                )

    def peek(self, key: Key, *, default: Any = _MISSING) -> Any:
        """The reduced value of ``key`` (a nested dict for a prefix), without changing anything.

        Raises:
            KeyError: Nothing was logged under ``key`` and no ``default`` was given.
        """
        parts = _split(key)
        stat = self._stats.get(parts)
        if stat is not None:
            return stat.peek()
        below = {k[len(parts) :]: s for k, s in self._stats.items() if k[: len(parts)] == parts}
        if below:
            return _nest({k: s.peek() for k, s in below.items()})
        if default is not _MISSING:
            return default
        raise KeyError(f"No metric {'/'.join(parts)!r} was logged; logged: {sorted('/'.join(k) for k in self._stats)}.")

    def reduce(self) -> dict[str, Any]:
        """Reduce every statistic: a nested dict of the values, then clear the ``clear_on_reduce`` ones."""
        out = _nest({k: s.peek() for k, s in self._stats.items()})
        for stat in self._stats.values():
            if stat.clear_on_reduce:
                stat.values.clear()
        return out

    def pop_deltas(self) -> list[dict[str, Any]]:
        """What was logged since the last call, for :meth:`aggregate` in another logger (plain data)."""
        deltas = [d.record(k) for k, d in self._deltas.items() if d.values]
        self._deltas = {}
        return deltas

    def aggregate(self, deltas: Iterable[Sequence[Mapping[str, Any]]], *, key: Key | None = None) -> None:
        """Log again, under ``key``, what other loggers' :meth:`pop_deltas` handed over, one logger after another."""
        prefix = _split(key) if key is not None else ()
        for logger_deltas in deltas:
            for delta in logger_deltas:
                for value in delta["values"]:
                    self.log_value(
                        (*prefix, *delta["key"]),
                        value,
                        reduce=delta["reduce"],
                        window=delta["window"],
                        ema_coeff=delta["ema_coeff"],
                        clear_on_reduce=delta["clear_on_reduce"],
                        percentiles=delta.get("percentiles") or False,
                    )

    def __contains__(self, key: object) -> bool:
        if not isinstance(key, str | tuple):
            return False
        try:
            self.peek(key)
        except (KeyError, ValueError):
            return False
        return True

    # ------------------------------------------------------------------ checkpoint state

    def get_state(self) -> dict[str, Any]:
        """Every statistic (settings and kept values) and the values not yet handed over."""

        return {
            "stats": [s.record(k) for k, s in self._stats.items()],
            "deltas": [d.record(k) for k, d in self._deltas.items()],
        }

    def set_state(self, state: Mapping[str, Any], *, where: str = "metrics") -> None:
        """Replace every statistic with those of ``state`` (from :meth:`get_state`).

        Raises:
            IncompatibleCheckpointError: ``state`` is not a metrics logger's state
                (the message names ``where`` and the record).
        """
        self._stats, self._deltas = read_state(state, where=where)


def read_state(state: Any, *, where: str) -> tuple[dict[tuple[str, ...], _Stat], dict[tuple[str, ...], _Stat]]:
    """The statistics and pending deltas of a :meth:`MetricsLogger.get_state`, checked; nothing is changed.

    Besides each record (settings RLlib's ``Stats`` accepts, numbers, no more values than
    the window), the keys must nest: a key is never also the prefix of another one
    (``reduce()`` would have to put a value and a dict at one place), and a delta (the
    values logged since the last hand-over) belongs to a statistic of the same settings.

    Raises:
        IncompatibleCheckpointError: ``state`` is not a metrics logger's state (the message names
            ``where`` and the record).
    """
    if not isinstance(state, Mapping):
        raise IncompatibleCheckpointError(
            f"{where}: expected a metrics logger's state (a dict), found a {type(state).__name__}. The checkpoint "
            "was not written by this version of cairn.rl, or was altered."
        )
    stats = _read_records(state.get("stats", []), where=f"{where}/stats")
    deltas = _read_records(state.get("deltas", []), where=f"{where}/deltas")
    prefixes = {parts[:i] for parts in stats for i in range(1, len(parts))}
    clash = next((parts for parts in stats if parts in prefixes), None)
    stray = next((k for k, d in deltas.items() if k not in stats or d.empty_like() != stats[k].empty_like()), None)
    if clash is not None or stray is not None:
        problem = (
            f"the metric {'/'.join(clash)!r} is also the prefix of other metrics"
            if clash is not None
            else f"the pending values of {'/'.join(stray or ())!r} belong to no statistic of their settings"
        )
        raise IncompatibleCheckpointError(
            f"{where}: {problem}, which no MetricsLogger records. The checkpoint was not written by this version "
            "of cairn.rl, or was altered."
        )
    return stats, deltas


def _check_settings(
    parts: tuple[str, ...], reduce: Any, window: Any, ema_coeff: Any, percentiles: Any
) -> tuple[int, ...] | None:
    """Raise ``ValueError`` for settings RLlib's ``Stats`` refuses; return the percentiles to keep (or None)."""
    name = "/".join(parts)
    if reduce not in _REDUCES:
        raise ValueError(f"Metric {name!r}: reduce must be one of {_REDUCES}, got {reduce!r:.40}.")
    if window is not None and (type(window) is not int or window < 1):
        raise ValueError(f"Metric {name!r}: window must be a positive int or None, got {window!r:.40}.")
    if ema_coeff is not None and (
        reduce != "mean" or window is not None or not isinstance(ema_coeff, float | int) or not 0.0 < ema_coeff <= 1.0
    ):
        raise ValueError(f"Metric {name!r}: ema_coeff (in (0, 1]) applies only to reduce='mean' with window=None.")
    if percentiles is False or percentiles is None:
        return None
    if reduce is not None:
        raise ValueError(
            f"Metric {name!r}: percentiles apply only to reduce=None (the values are kept), got reduce={reduce!r}."
        )
    if percentiles is True:
        return DEFAULT_PERCENTILES
    if not isinstance(percentiles, list | tuple) or not all(type(p) is int and 0 <= p <= 100 for p in percentiles):
        raise ValueError(
            f"Metric {name!r}: percentiles is True or a list of ints in [0, 100], got {percentiles!r:.80}."
        )
    return tuple(percentiles)


def _read_records(records: Any, *, where: str) -> dict[tuple[str, ...], _Stat]:
    if not isinstance(records, list | tuple):
        raise IncompatibleCheckpointError(
            f"{where}: expected a list of metric records, found a {type(records).__name__}."
        )
    out: dict[tuple[str, ...], _Stat] = {}
    for i, record in enumerate(records):
        try:
            if not isinstance(record, Mapping):
                raise TypeError(f"a {type(record).__name__}, not a dict")
            parts = _split(tuple(record["key"]))
            reduce, window, ema = record["reduce"], record["window"], record["ema_coeff"]
            recorded_percentiles = record.get("percentiles")  # absent from records of older versions
            kept = _check_settings(parts, reduce, window, ema, recorded_percentiles or False)
            if ema is not None and not isinstance(ema, float):
                raise ValueError(f"ema_coeff {ema!r:.40}")
            values = [_number(v, parts) for v in record["values"]]
            unbounded = window is None and (reduce == "mean" or reduce is None)  # EMA deltas, lists
            if len(values) > (window or 1) and not unbounded:
                raise ValueError(f"{len(values)} values for a window of {window or 1}")
            out[parts] = _Stat(reduce, window, bool(record["clear_on_reduce"]), ema, values, kept)
        except (KeyError, TypeError, ValueError) as err:
            raise IncompatibleCheckpointError(
                f"{where}[{i}] is not a metric record of cairn's MetricsLogger ({type(err).__name__}: {err}). "
                "The checkpoint was not written by this version of cairn.rl, or was altered."
            ) from err
    return out


def _nest(flat: Mapping[tuple[str, ...], Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for parts, value in flat.items():
        node = out
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = value
    return out


def flatten_metrics(nested: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}}`` -> ``{"a/b": 1}`` (how :meth:`Algorithm.train` reports a logger's values)."""
    out: dict[str, Any] = {}
    for name, value in nested.items():
        if isinstance(value, Mapping):
            out.update(flatten_metrics(value, f"{prefix}{name}/"))
        else:
            out[f"{prefix}{name}"] = value
    return out

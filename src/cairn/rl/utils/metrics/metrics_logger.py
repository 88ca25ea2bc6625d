"""MetricsLogger: named statistics that components log, aggregate up a tree of loggers, and checkpoint.

It is RLlib 2.60's ``ray.rllib.utils.metrics.metrics_logger.MetricsLogger``, with the
same :mod:`~cairn.rl.utils.metrics.stats` classes and semantics:

- Leaves (each env runner's logger) log values with :meth:`MetricsLogger.log_value`;
  ``reduce=`` picks the stat: ``"mean"``, ``"ema"``, ``"min"``, ``"max"``, ``"sum"``,
  ``"lifetime_sum"``, ``"percentiles"``, ``"item"``, ``"item_series"`` (the keys of
  :data:`DEFAULT_STATS_CLS_LOOKUP`). Without ``reduce``: an EMA (``ema_coeff`` 0.01), or a
  mean of the last ``window`` values when a window is given. ``reduce="sum"`` with
  ``clear_on_reduce=False`` is a lifetime sum; ``reduce="mean"`` without a window is a plain
  mean of the values since the last reduce.
- :meth:`MetricsLogger.reduce` returns the reduced stats (``compile=False``) for the next
  logger up, whose :meth:`MetricsLogger.aggregate` merges the stats of its parallel
  components, and starts a new cycle: every stat is cleared except a root logger's lifetime
  sums. The root logger (``MetricsLogger(root=True)``: the algorithm's) reduces with
  ``compile=True`` into the iteration's results.
- :meth:`MetricsLogger.peek` reads without changing anything (``throughput=True``: the
  throughputs of ``with_throughput`` sums; ``latest_merged_only``; ``compile``).

cairn's rules on top of RLlib's: a key is a ``"/"``-separated string or a sequence of
strings (``"a/b"`` and ``("a", "b")`` name the same stat), and a key is either a stat or a
group of stats, never both; a key logged again with an explicitly different ``reduce`` or
``window`` is refused (RLlib ignores the new settings); values are numbers (items may also
be strings or None). :meth:`MetricsLogger.pop_deltas` is :meth:`reduce` as plain data (what
a remote env runner sends; :meth:`aggregate` takes both forms).

The logger is checkpoint state (:meth:`MetricsLogger.get_state` /
:meth:`MetricsLogger.set_state`): the algorithm's root logger holds the lifetime sums, so
they continue exactly across a checkpoint; a state is checked before anything changes
(:func:`read_state`), and the record lists of cairn's earlier logger are read as RLlib reads
its legacy stats.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

from cairn.errors import IncompatibleCheckpointError
from cairn.rl.utils.metrics.stats import (
    DEFAULT_PERCENTILES,
    EmaStats,
    ItemSeriesStats,
    ItemStats,
    LifetimeSumStats,
    MaxStats,
    MeanStats,
    MinStats,
    PercentilesStats,
    StatsBase,
    SumStats,
)

__all__ = [
    "DEFAULT_PERCENTILES",
    "DEFAULT_STATS_CLS_LOOKUP",
    "MetricsLogger",
    "flatten_metrics",
    "read_state",
]

DEFAULT_STATS_CLS_LOOKUP: Mapping[str, type[StatsBase]] = {
    "mean": MeanStats,
    "ema": EmaStats,
    "min": MinStats,
    "max": MaxStats,
    "sum": SumStats,
    "lifetime_sum": LifetimeSumStats,
    "percentiles": PercentilesStats,
    "item": ItemStats,
    "item_series": ItemSeriesStats,
}
"""``reduce=`` name -> stats class (RLlib's lookup; a logger may be given its own)."""

STATE_VERSION = 2
"""Version of :meth:`MetricsLogger.get_state`'s layout (1: cairn's earlier record lists, read too)."""

_MISSING: Any = object()
_THROUGHPUT_REDUCES = ("sum", "lifetime_sum")

Key = str | Sequence[str]
Tree = dict[str, Any]

_T = TypeVar("_T")


def _split(key: Key) -> tuple[str, ...]:
    """``"a/b"``, ``("a", "b")`` or ``["a", "b/c"]`` -> the key's parts; refuse empty ones."""
    raw = [key] if isinstance(key, str) else list(key)
    if not raw or not all(isinstance(part, str) for part in raw):
        raise ValueError(f"A metric key is a '/'-separated string or a sequence of strings, got {key!r:.80}.")
    parts = tuple(p for part in raw for p in part.split("/"))
    if any(not p for p in parts):
        raise ValueError(f"A metric key has no empty parts, got {key!r:.80}.")
    return parts


def _leaves(tree: Mapping[str, Any], prefix: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    for name, value in tree.items():
        if isinstance(value, Mapping):
            yield from _leaves(value, (*prefix, name))
        else:
            yield (*prefix, name), value


def _nest(flat: Iterable[tuple[tuple[str, ...], Any]]) -> Tree:
    out: Tree = {}
    for parts, value in flat:
        node = out
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = value
    return out


class MetricsLogger:
    """Named stats (RLlib 2.60's ``MetricsLogger``; see the module docstring).

    Example::

        metrics.log_value("num_long_episodes", 1, reduce="lifetime_sum")
        metrics.log_value("episode_return", ret, reduce="mean", window=10)
        metrics.peek("num_long_episodes")

    Args:
        root: The root of the aggregation tree (the algorithm's logger): its lifetime sums
            are never cleared, and it reports throughputs.
        stats_cls_lookup: ``reduce=`` name -> stats class (default :data:`DEFAULT_STATS_CLS_LOOKUP`).
    """

    def __init__(self, root: bool = False, stats_cls_lookup: Mapping[str, type[StatsBase]] | None = None) -> None:
        self.stats: Tree = {}
        self._is_root_logger = bool(root)
        self._time_when_initialized = time.perf_counter()
        self.stats_cls_lookup: Mapping[str, type[StatsBase]] = dict(stats_cls_lookup or DEFAULT_STATS_CLS_LOOKUP)

    @property
    def is_root(self) -> bool:
        """Whether this is the root logger (``MetricsLogger(root=True)``)."""
        return self._is_root_logger

    # ------------------------------------------------------------------ keys

    def _get(self, parts: tuple[str, ...]) -> Any:
        """The stat or group (dict) at ``parts``, or ``_MISSING``."""
        node: Any = self.stats
        for part in parts:
            if not isinstance(node, dict) or part not in node:
                return _MISSING
            node = node[part]
        return node

    def _set(self, parts: tuple[str, ...], stats: StatsBase) -> None:
        node = self.stats
        for i, part in enumerate(parts[:-1]):
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise ValueError(
                    f"Metric {'/'.join(parts)!r} clashes with {'/'.join(parts[: i + 1])!r}: a key is either a "
                    "value or a group of values."
                )
            node = child
        existing = node.get(parts[-1])
        if isinstance(existing, dict):
            raise ValueError(
                f"Metric {'/'.join(parts)!r} clashes with the metrics below it: a key is either a value or a group "
                "of values."
            )
        node[parts[-1]] = stats

    def _check_free(self, parts: tuple[str, ...]) -> None:
        """Raise ``ValueError`` if a new stat at ``parts`` would clash with a stat or group."""
        node: Any = self.stats
        for i, part in enumerate(parts):
            if not isinstance(node, dict) or part not in node:
                return
            node = node[part]
            if isinstance(node, StatsBase) or i == len(parts) - 1:
                raise ValueError(
                    f"Metric {'/'.join(parts)!r} clashes with {'/'.join(parts[: i + 1])!r}: a key is either a value or "
                    "a group of values."
                )

    def __contains__(self, key: object) -> bool:
        if not isinstance(key, str | tuple | list):
            return False
        try:
            return self._get(_split(key)) is not _MISSING
        except ValueError:
            return False

    # ------------------------------------------------------------------ logging

    def _stats_for(
        self,
        parts: tuple[str, ...],
        *,
        reduce: str | None,
        window: int | float | None,
        ema_coeff: float | None,
        percentiles: Sequence[float] | bool | None,
        clear_on_reduce: bool | None,
        with_throughput: bool | None,
        register: bool = True,
    ) -> StatsBase:
        """The stat at ``parts``, created with these settings if there is none (RLlib's rules).

        ``register=False``: a new stat is not put in place yet (:meth:`log_value` does, once its
        first value was accepted, so that a refused value leaves nothing behind).
        """
        name = "/".join(parts)
        explicit_reduce = reduce
        # RLlib's compatibility rules: no reduce -> a windowed mean or an EMA; sum kept -> lifetime sum.
        if reduce is None:
            reduce = "mean" if window is not None else "ema"
        if reduce == "sum" and clear_on_reduce is False:
            reduce = "lifetime_sum"
        existing = self._get(parts)
        if isinstance(existing, StatsBase):
            clash = explicit_reduce is not None and existing.stats_cls_identifier not in (
                reduce,
                "lifetime_sum" if reduce == "sum" else reduce,
            )
            if clash or (window is not None and getattr(existing, "_window", window) != window):
                raise ValueError(
                    f"Metric {name!r} was first logged as {existing!r}; log it the same way (reduce={reduce!r}, "
                    f"window={window}) or under another key."
                )
            return existing
        if reduce not in self.stats_cls_lookup:
            raise ValueError(
                f"Metric {name!r}: invalid reduce method {reduce!r:.40}; one of {sorted(self.stats_cls_lookup)}."
            )
        if ema_coeff is not None and reduce != "ema":
            raise ValueError(
                f"Metric {name!r}: ema_coeff applies to reduce='ema' (or no reduce and no window) only, got "
                f"reduce={reduce!r}, window={window}."
            )
        if reduce == "ema" and window is not None:
            raise ValueError(f"Metric {name!r}: an EMA has no window; use reduce='mean' with a window instead.")
        if percentiles not in (None, False) and reduce != "percentiles":
            raise ValueError(f"Metric {name!r}: percentiles apply only to reduce='percentiles', got {reduce!r}.")
        if with_throughput and reduce not in _THROUGHPUT_REDUCES:
            raise ValueError(f"Metric {name!r}: with_throughput applies only to reduce='sum' or 'lifetime_sum'.")
        kwargs: dict[str, Any] = {"is_root": self._is_root_logger, "is_leaf": True}
        if window is not None:
            kwargs["window"] = window
        if reduce == "ema":
            kwargs["ema_coeff"] = 0.01 if ema_coeff is None else ema_coeff
        if percentiles not in (None, False):
            kwargs["percentiles"] = percentiles
        if with_throughput is not None:
            kwargs["with_throughput"] = with_throughput
        try:
            stats = self.stats_cls_lookup[reduce](**kwargs)
        except TypeError as err:
            raise ValueError(f"Metric {name!r}: reduce={reduce!r} does not take these settings ({err}).") from err
        if register:
            self._set(parts, stats)
        return stats

    def log_value(
        self,
        key: Key,
        value: Any,
        *,
        reduce: str | None = None,
        window: int | float | None = None,
        ema_coeff: float | None = None,
        percentiles: Sequence[float] | bool | None = None,
        clear_on_reduce: bool | None = None,
        with_throughput: bool | None = None,
    ) -> None:
        """Log ``value`` under ``key`` (the first call for a key creates its stat with these settings).

        Args:
            key: ``"a/b"``, ``("a", "b")`` or ``["a", "b"]``.
            value: A number (int, float, bool, numpy or 0-d torch scalar); for ``"item"`` and
                ``"item_series"`` also a string or None.
            reduce: A key of the logger's ``stats_cls_lookup``; ``None``: ``"mean"`` with a
                window, else ``"ema"``.
            window: Keep (and reduce over) the last ``window`` values at this leaf.
            ema_coeff: The EMA's coefficient (``reduce="ema"``), 0.01 by default.
            percentiles: With ``reduce="percentiles"``: the percentiles (default RLlib's 0, 50,
                75, 90, 95, 99, 100).
            clear_on_reduce: ``False`` with ``reduce="sum"`` makes a lifetime sum (RLlib's
                deprecated spelling of ``reduce="lifetime_sum"``); otherwise ignored, since every
                stat but a root's lifetime sum is cleared at each reduce.
            with_throughput: Also track the value per second (``"sum"``, ``"lifetime_sum"``).

        Raises:
            ValueError: Settings that RLlib refuses, or that differ from the key's.
            TypeError: ``value`` is not a value the stat takes.
        """
        parts = _split(key)
        stats = self._stats_for(
            parts,
            reduce=reduce,
            window=window,
            ema_coeff=ema_coeff,
            percentiles=percentiles,
            clear_on_reduce=clear_on_reduce,
            with_throughput=with_throughput,
            register=False,
        )
        if self._get(parts) is stats:
            stats.push(value)
            return
        self._check_free(parts)
        stats.push(value)
        self._set(parts, stats)

    def log_dict(
        self,
        value_dict: Mapping[str, Any],
        *,
        key: Key | None = None,
        reduce: str | None = None,
        window: int | float | None = None,
        ema_coeff: float | None = None,
        percentiles: Sequence[float] | bool | None = None,
        clear_on_reduce: bool | None = None,
        with_throughput: bool | None = None,
    ) -> None:
        """Log every leaf of the nested dict ``value_dict`` (under ``key``, if given), as :meth:`log_value`."""
        if not isinstance(value_dict, Mapping):
            raise TypeError(f"log_dict takes a dict of values, got a {type(value_dict).__name__}.")
        prefix = _split(key) if key is not None else ()
        for parts, value in _leaves(value_dict):
            self.log_value(
                (*prefix, *parts),
                value,
                reduce=reduce,
                window=window,
                ema_coeff=ema_coeff,
                percentiles=percentiles,
                clear_on_reduce=clear_on_reduce,
                with_throughput=with_throughput,
            )

    def log_time(
        self,
        key: Key,
        *,
        reduce: str | None = None,
        window: int | float | None = None,
        ema_coeff: float | None = None,
        percentiles: Sequence[float] | bool | None = None,
        clear_on_reduce: bool | None = None,
        with_throughput: bool | None = None,
    ) -> StatsBase:
        """The stat under ``key``, to time a ``with`` block: its seconds are logged on exit.

        The settings are those of :meth:`log_value`, checked before the block runs. The seconds
        are wall-clock measurements: a resumed run restores the stat, but new measurements
        differ from run to run.

        Example::

            with metrics.log_time("timers/my_step"):   # an EMA of the durations
                do_something()
        """
        return self._stats_for(
            _split(key),
            reduce=reduce,
            window=window,
            ema_coeff=ema_coeff,
            percentiles=percentiles,
            clear_on_reduce=clear_on_reduce,
            with_throughput=with_throughput,
        )

    # ------------------------------------------------------------------ reading

    def peek(
        self,
        key: Key | None = None,
        default: Any = _MISSING,
        compile: bool = True,
        throughput: bool = False,
        latest_merged_only: bool = False,
    ) -> Any:
        """The reduced value of ``key`` (a nested dict for a group; everything for ``None``), changing nothing.

        Args:
            key: The stat or group to read; ``None``: all of them.
            default: Returned when nothing was logged under ``key``.
            compile: ``False``: each stat's value as a list (what it would hand upstream).
            throughput: The throughputs (``with_throughput`` stats; ``"<name>_throughput"`` keys in
                a group) instead of the values; a root logger's only.
            latest_merged_only: Only what the latest :meth:`aggregate` brought (aggregated stats).

        Raises:
            KeyError: Nothing was logged under ``key`` and no ``default`` was given.
            ValueError: ``throughput=True`` on a non-root logger, or on a stat without throughput.
        """
        if throughput:
            if not self._is_root_logger:
                raise ValueError("Throughputs can only be peeked from a root logger (MetricsLogger(root=True)).")
            return self._throughputs(key, default)
        node = self.stats if key is None else self._get(_split(key))
        if isinstance(node, StatsBase):
            return node.peek(compile=compile, latest_merged_only=latest_merged_only)
        if isinstance(node, dict) and (node or key is None):
            return _nest(
                (parts, s.peek(compile=compile, latest_merged_only=latest_merged_only)) for parts, s in _leaves(node)
            )
        if default is not _MISSING:
            return default
        logged = sorted("/".join(parts) for parts, _ in _leaves(self.stats))
        raise KeyError(f"No metric {'/'.join(_split(key or ()))!r} was logged; logged: {logged}.")

    def _throughputs(self, key: Key | None, default: Any) -> Any:
        node = self.stats if key is None else self._get(_split(key))
        if isinstance(node, StatsBase):
            if not node.has_throughputs:
                raise ValueError(f"Metric {key!r} does not track a throughput (log it with with_throughput=True).")
            return node.throughputs
        if not isinstance(node, dict):
            return None if default is _MISSING else default
        found = [
            ((*parts[:-1], f"{parts[-1]}_throughput"), s.throughputs) for parts, s in _leaves(node) if s.has_throughputs
        ]
        if not found:
            return None if default is _MISSING else default
        return _nest(found)

    @staticmethod
    def peek_results(results: Any, compile: bool = True) -> Any:
        """``results`` (a nested structure of stats, e.g. from :meth:`reduce`) with each stat peeked."""
        if isinstance(results, StatsBase):
            return results.peek(compile=compile)
        if isinstance(results, Mapping):
            return {k: MetricsLogger.peek_results(v, compile=compile) for k, v in results.items()}
        if isinstance(results, list | tuple):
            return type(results)(MetricsLogger.peek_results(v, compile=compile) for v in results)
        return results

    def reduce(self, compile: bool = False) -> Tree:
        """Reduce every stat and start a new cycle (clear all but a root's lifetime sums).

        Returns:
            A nested dict of the reduced stats (for another logger's :meth:`aggregate`) or, with
            ``compile=True``, of their values (an iteration's results).
        """
        return _nest((parts, stats.reduce(compile=compile)) for parts, stats in list(_leaves(self.stats)))

    def compile(self) -> Tree:
        """The values of :meth:`reduce` (``compile=True``) with the throughputs (``"<name>_throughput"``)."""
        throughputs = self._throughputs(None, {}) if self._is_root_logger else {}
        values = self.reduce(compile=True)
        for parts, value in _leaves(throughputs):
            node = values
            for part in parts[:-1]:
                node = node.setdefault(part, {})
            node[parts[-1]] = value
        compiled: Tree = _unwrap_singletons(values)
        return compiled

    # ------------------------------------------------------------------ aggregation

    def aggregate(
        self,
        stats_dicts: Iterable[Mapping[str, Any] | Sequence[Mapping[str, Any]]],
        *,
        key: Key | None = None,
    ) -> None:
        """Merge the reduced stats of parallel components (one dict per component, in order).

        Each entry is what another logger's :meth:`reduce` returned (a nested dict of stats) or
        its :meth:`pop_deltas` (the same as plain data). Per key, the incoming stats are merged
        into this logger's aggregation stat (created as an empty copy of the first one); a key
        logged directly here cannot also be aggregated into.

        Args:
            stats_dicts: The components' reduced stats.
            key: Merge everything under this key.

        Raises:
            ValueError: A key that this logger logs directly, or plain data that is no reduced stats.
        """
        prefix = _split(key) if key is not None else ()
        incoming: dict[tuple[str, ...], list[StatsBase]] = {}
        for component in stats_dicts:
            for parts, stats in self._incoming(component):
                incoming.setdefault((*prefix, *parts), []).append(stats)
        for parts, parts_stats in incoming.items():
            own = self._get(parts)
            if own is _MISSING:
                own = parts_stats[0].clone(init_overrides={"is_root": self._is_root_logger, "is_leaf": False})
                if own.has_throughputs:
                    own.initialize_throughput_reference_time(self._time_when_initialized)
                self._set(parts, own)
            elif not isinstance(own, StatsBase) or own.is_leaf:
                raise ValueError(
                    f"Cannot aggregate into {'/'.join(parts)!r}: it was logged directly in this logger. Keep the keys "
                    "of aggregated and directly logged metrics apart."
                )
            own.merge(parts_stats)

    def _incoming(
        self, component: Mapping[str, Any] | Sequence[Mapping[str, Any]]
    ) -> Iterator[tuple[tuple[str, ...], StatsBase]]:
        if isinstance(component, Mapping):
            for parts, value in _leaves(component):
                if isinstance(value, list) and len(value) == 1:
                    value = value[0]  # RLlib hands some stats over wrapped in a one-element list
                if not isinstance(value, StatsBase):
                    raise ValueError(
                        f"aggregate() takes reduced stats (another logger's reduce() or pop_deltas()); "
                        f"{'/'.join(parts)!r} is a {type(value).__name__}."
                    )
                yield parts, value
            return
        lookup = self.stats_cls_lookup
        yield from _read_records(component, where="aggregated metrics", read=lambda r, p: (p, _stats_of(r, lookup)))

    def pop_deltas(self) -> list[dict[str, Any]]:
        """:meth:`reduce` (``compile=False``) as plain data: what a remote component hands the root."""
        return [{"key": list(parts), "state": stats.get_state()} for parts, stats in _leaves(self.reduce())]

    # ------------------------------------------------------------------ removing

    def reset(self) -> None:
        """Forget every stat."""
        self.stats = {}

    def delete(self, *key: str, key_error: bool = True) -> None:
        """Forget the stat or group ``key`` (``delete("a", "b")`` or ``delete("a/b")``).

        Raises:
            KeyError: Nothing is logged under ``key`` and ``key_error`` is True.
        """
        parts = _split(list(key))
        parent = self._get(parts[:-1]) if len(parts) > 1 else self.stats
        if not isinstance(parent, dict) or parts[-1] not in parent:
            if key_error:
                raise KeyError(f"No metric {'/'.join(parts)!r} was logged.")
            return
        del parent[parts[-1]]

    # ------------------------------------------------------------------ checkpoint state

    def get_state(self) -> dict[str, Any]:
        """Every stat's state (plain data), with its key."""
        return {
            "version": STATE_VERSION,
            "stats": [{"key": list(parts), "state": stats.get_state()} for parts, stats in _leaves(self.stats)],
        }

    def set_state(self, state: Mapping[str, Any], *, where: str = "metrics") -> None:
        """Replace every stat with those of ``state`` (from :meth:`get_state`, or cairn's earlier logger).

        Raises:
            IncompatibleCheckpointError: ``state`` is not a metrics logger's state (the message
                names ``where`` and the record); nothing changed.
        """
        self.stats = read_state(state, where=where, root=self._is_root_logger, lookup=self.stats_cls_lookup)


def read_state(
    state: Any,
    *,
    where: str,
    root: bool = False,
    lookup: Mapping[str, type[StatsBase]] | None = None,
) -> Tree:
    """The stats of a :meth:`MetricsLogger.get_state`, checked and built (nothing else changes).

    Besides each stat's own checks (:meth:`StatsBase.from_state`), the keys must nest: a key is
    never also the prefix of another one. A state of cairn's earlier logger (records with
    ``reduce``/``window``/``values``) is converted as RLlib converts its legacy stats: a kept
    sum becomes a lifetime sum, a mean without a window an EMA, a list ``item_series``
    (``percentiles`` with percentiles); a root logger takes the stats' values, any other
    logger only the values it had not handed over yet (the earlier logger's pending deltas).

    Raises:
        IncompatibleCheckpointError: ``state`` is not a metrics logger's state (the message names
            ``where`` and the record).
    """
    if not isinstance(state, Mapping):
        raise IncompatibleCheckpointError(
            f"{where}: expected a metrics logger's state (a dict), found a {type(state).__name__}. The checkpoint "
            "was not written by this version of cairn.rl, or was altered."
        )
    known = lookup or DEFAULT_STATS_CLS_LOOKUP
    version = state.get("version", 1)
    if version == STATE_VERSION:
        records = _read_records(state.get("stats"), where=f"{where}/stats", read=lambda r, p: (p, _stats_of(r, known)))
    elif version == 1:
        records = _read_v1(state, where=where, root=root)
    else:
        raise IncompatibleCheckpointError(
            f"{where}: metrics state version {version!r:.20} is not one this cairn reads (1, {STATE_VERSION}). "
            "Use the cairn version that wrote the checkpoint, or a newer one."
        )
    logger = MetricsLogger(root=root)
    for parts, stats in records:
        try:
            logger._set(parts, stats)
        except ValueError as err:
            raise IncompatibleCheckpointError(
                f"{where}: {err} No MetricsLogger records that. The checkpoint was not written by this version of "
                "cairn.rl, or was altered."
            ) from err
    return logger.stats


def _read_records(records: Any, *, where: str, read: Callable[[Mapping[str, Any], tuple[str, ...]], _T]) -> list[_T]:
    """``read(record, key parts)`` of each of a list of metric records (either layout).

    Raises:
        IncompatibleCheckpointError: No list, a record no dict with a key, or one ``read`` refuses.
    """
    if not isinstance(records, list | tuple):
        raise IncompatibleCheckpointError(
            f"{where}: expected a list of metric records, found a {type(records).__name__}."
        )
    out: list[_T] = []
    for i, record in enumerate(records):
        try:
            if not isinstance(record, Mapping):
                raise TypeError(f"a {type(record).__name__}, not a dict")
            out.append(read(record, _split(list(record["key"]))))
        except (KeyError, TypeError, ValueError, AssertionError) as err:
            raise IncompatibleCheckpointError(
                f"{where}[{i}] is not a metric record of cairn's MetricsLogger ({type(err).__name__}: {err}). "
                "The checkpoint was not written by this version of cairn.rl, or was altered."
            ) from err
    return out


def _stats_of(record: Mapping[str, Any], lookup: Mapping[str, type[StatsBase]]) -> StatsBase:
    """The stat of a record of today's layout (``{"key", "state"}``)."""
    stats_state = record["state"]
    if not isinstance(stats_state, Mapping):
        raise TypeError(f"a stat's state is a dict, got a {type(stats_state).__name__}")
    identifier = stats_state.get("stats_cls_identifier")
    if not isinstance(identifier, str) or identifier not in lookup:
        raise ValueError(f"unknown stats class {identifier!r:.40}; known: {sorted(lookup)}")
    return lookup[identifier].from_state(stats_state)


def _read_v1(state: Mapping[str, Any], *, where: str, root: bool) -> list[tuple[tuple[str, ...], StatsBase]]:
    """Records of cairn's earlier logger (``{"stats": [...], "deltas": [...]}``) as today's stats."""
    pending = dict(_read_records(state.get("deltas", []), where=f"{where}/deltas", read=lambda r, p: (p, _values(r))))

    def read(record: Mapping[str, Any], parts: tuple[str, ...]) -> tuple[tuple[str, ...], StatsBase]:
        kind, settings = _v1_kind(record)
        stats = DEFAULT_STATS_CLS_LOOKUP[kind](**settings, is_root=root, is_leaf=True)
        # The root (the algorithm's logger) keeps its stats' values; a leaf (an env runner's) only what it
        # had not handed over yet (the earlier logger's pending deltas), so that nothing is counted twice.
        for value in _values(record) if root else pending.get(parts, []):
            stats.push(value)
        return parts, stats

    return _read_records(state.get("stats", []), where=f"{where}/stats", read=read)


def _values(record: Mapping[str, Any]) -> list[Any]:
    if not isinstance(values := record["values"], list | tuple):
        raise TypeError("values is not a list")
    return list(values)


def _v1_kind(record: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """The ``reduce=`` name (a key of :data:`DEFAULT_STATS_CLS_LOOKUP`) and settings of an earlier record."""
    reduce, window, ema, kept = record["reduce"], record["window"], record["ema_coeff"], not record["clear_on_reduce"]
    if reduce is None:
        if percentiles := record.get("percentiles"):
            return "percentiles", {"percentiles": list(percentiles), "window": window}
        return "item_series", {"window": window}
    if reduce == "sum" and window is None and kept:
        return "lifetime_sum", {}  # the root holds the total
    if reduce == "mean" and window is None:
        return "ema", {"ema_coeff": 0.01 if ema is None else ema}
    if reduce in ("mean", "sum", "min", "max"):
        return str(reduce), {"window": window}
    raise ValueError(f"reduce {reduce!r:.40}")


def _unwrap_singletons(tree: Any) -> Any:
    if isinstance(tree, dict):
        return {k: _unwrap_singletons(v) for k, v in tree.items()}
    if isinstance(tree, list) and len(tree) == 1:
        return tree[0]
    return tree


def flatten_metrics(nested: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}}`` -> ``{"a/b": 1}`` (how :meth:`Algorithm.train` reports a logger's values)."""
    out: dict[str, Any] = {}
    for name, value in nested.items():
        if isinstance(value, Mapping):
            out.update(flatten_metrics(value, f"{prefix}{name}/"))
        else:
            out[f"{prefix}{name}"] = value
    return out

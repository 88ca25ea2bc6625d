"""RLlib's :class:`LifetimeSumStats`: a sum over the whole run, with its throughputs."""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from typing import Any

from cairn.rl.utils.metrics.stats.base import StatsBase, _flag, _is_nan, check_number, to_cpu

__all__ = ["LifetimeSumStats"]


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

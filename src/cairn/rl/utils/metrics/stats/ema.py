"""RLlib's :class:`EmaStats`: an exponential moving average."""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from cairn.rl.utils.metrics.stats.base import StatsBase, _is_nan, _numbers, _python, check_number, to_cpu

__all__ = ["EmaStats"]


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

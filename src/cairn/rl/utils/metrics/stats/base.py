"""The base of RLlib's Stats classes (:class:`StatsBase`) and the checks of the values they hold."""

from __future__ import annotations

import abc
import math
import numbers
import threading
import time
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, ClassVar

import numpy as np

from cairn.state_checks import Count

__all__ = ["StatsBase", "check_number", "to_cpu"]


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

"""Which checkpoints to keep: policies as small dataclasses and pure functions, tested without I/O.

``CheckpointManager(root, retention=KeepLast(3) | KeepBest(1, "env_runners/episode_return_mean") | KeepEvery(1000))``
keeps the 3 newest, the best one and every 1000th step; the keywords ``keep_last``,
``keep_best``, ``metric`` and ``mode`` are the shorthand (:class:`RetentionPolicy`).
A policy of your own is any object with ``keep(entries) -> set[int]`` (:class:`Policy`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from cairn._metrics import RETURN_METRIC

KNOWN_MODES: Mapping[str, Literal["max", "min"]] = {
    RETURN_METRIC: "max",
    f"evaluation/{RETURN_METRIC}": "max",
    "loss": "min",
    "val_loss": "min",
}
"""The metrics whose better end :class:`KeepBest` knows without ``mode=``; any other needs it."""

Entries = Sequence[tuple[int, Mapping[str, Any] | None]]
"""Committed checkpoints as (step, metrics), in any order."""


class Policy(Protocol):
    """Which checkpoints to keep: a pure function of the (step, metrics) of the committed ones.

    Policies combine with ``|`` (keep what either keeps), as Orbax's preservation
    policies do. The manager adds its own safety rule on top (never delete the newest
    checkpoint that verifies), whatever the policy says.
    """

    def keep(self, entries: Entries) -> set[int]:
        """The steps to keep among ``entries``."""
        ...

    def __or__(self, other: Policy) -> Policy:
        """A policy keeping what either keeps."""
        ...


class _Combinable:
    def __or__(self, other: Policy) -> Policy:
        return AnyOf((self, other))  # type: ignore[arg-type]


@dataclass(frozen=True)
class KeepAll(_Combinable):
    """Keep every checkpoint (the manager's default)."""

    def keep(self, entries: Entries) -> set[int]:
        """Every step."""
        return {step for step, _ in entries}


@dataclass(frozen=True)
class KeepLast(_Combinable):
    """Keep the ``n`` newest checkpoints."""

    n: int

    def __post_init__(self) -> None:
        """Refuse n < 1."""
        if isinstance(self.n, bool) or not isinstance(self.n, int) or self.n < 1:
            raise ValueError(f"keep_last must be an int >= 1 (or None to keep all), got {self.n!r}.")

    def keep(self, entries: Entries) -> set[int]:
        """The ``n`` highest steps."""
        return set(sorted(step for step, _ in entries)[-self.n :])


@dataclass(frozen=True)
class KeepEvery(_Combinable):
    """Keep every checkpoint whose step is a multiple of ``steps`` (milestones: 0, 1000, 2000, ...)."""

    steps: int

    def __post_init__(self) -> None:
        """Refuse steps < 1."""
        if isinstance(self.steps, bool) or not isinstance(self.steps, int) or self.steps < 1:
            raise ValueError(f"keep_every must be an int >= 1, got {self.steps!r}.")

    def keep(self, entries: Entries) -> set[int]:
        """The steps that are multiples of ``steps``."""
        return {step for step, _ in entries if step % self.steps == 0}


@dataclass(frozen=True)
class KeepBest(_Combinable):
    """Keep the ``n`` best checkpoints by ``metric`` (``mode`` ``"max"`` or ``"min"``); ties go to the newer.

    ``mode`` may be left out only for the metrics of :data:`KNOWN_MODES`
    (``env_runners/episode_return_mean``: ``"max"``; ``loss``: ``"min"``). Checkpoints
    without a finite value of ``metric`` are not ranked (and not kept by this policy).
    """

    n: int
    metric: str
    mode: Literal["max", "min"] | None = None

    def __post_init__(self) -> None:
        """Refuse settings that make no sense; fill in a known metric's mode."""
        if isinstance(self.n, bool) or not isinstance(self.n, int) or self.n < 0:
            raise ValueError(f"keep_best must be >= 0, got {self.n!r}.")
        if not isinstance(self.metric, str) or not self.metric:
            raise ValueError("keep_best needs metric= to rank checkpoints by.")
        if self.mode is None:
            if self.metric not in KNOWN_MODES:
                # A metric ending in return_mean may be an older run's name of the return: say today's.
                renamed = (
                    f" (a train() result's return is {RETURN_METRIC!r})" if self.metric.endswith("return_mean") else ""
                )
                raise ValueError(
                    f"KeepBest: say which end of {self.metric!r} is best, mode='max' (larger is better) or "
                    f"mode='min'; it is known without mode= only for {', '.join(sorted(KNOWN_MODES))}{renamed}."
                )
            object.__setattr__(self, "mode", KNOWN_MODES[self.metric])
        if self.mode not in ("max", "min"):
            raise ValueError(f"mode must be 'max' or 'min', got {self.mode!r}.")

    @property
    def better(self) -> Literal["max", "min"]:
        """The resolved ``mode`` (``__post_init__`` fills in a known metric's)."""
        assert self.mode is not None  # __post_init__ resolved it or raised
        return self.mode

    def keep(self, entries: Entries) -> set[int]:
        """The ``n`` best steps."""
        return set(best_steps(entries, self.metric, self.better, self.n))


@dataclass(frozen=True)
class AnyOf(_Combinable):
    """Keep what any of ``policies`` keeps (what ``a | b`` builds)."""

    policies: tuple[Policy, ...]

    def keep(self, entries: Entries) -> set[int]:
        """The union of what each policy keeps."""
        out: set[int] = set()
        for policy in self.policies:
            out |= policy.keep(entries)
        return out


def parts(policy: Policy) -> list[Policy]:
    """The policies a combined policy is made of (``policy`` itself when it is not combined)."""
    if isinstance(policy, AnyOf):
        return [p for sub in policy.policies for p in parts(sub)]
    if isinstance(policy, RetentionPolicy):
        return parts(policy.as_policy())
    return [policy]


def ranking(policy: Policy) -> KeepBest | None:
    """The first :class:`KeepBest` of ``policy``: the metric the manager's ``best()`` ranks by."""
    return next((p for p in parts(policy) if isinstance(p, KeepBest)), None)


def newest_kept(policy: Policy) -> int | None:
    """How many newest checkpoints ``policy`` keeps at least (its smallest :class:`KeepLast`), or None."""
    counts = [p.n for p in parts(policy) if isinstance(p, KeepLast)]
    return min(counts) if counts else None


@dataclass(frozen=True)
class RetentionPolicy(_Combinable):
    """Keep the ``keep_last`` newest checkpoints and the ``keep_best`` best by ``metric``.

    The keyword shorthand of ``CheckpointManager(keep_last=, keep_best=, metric=, mode=)``:
    the same as ``KeepLast(keep_last) | KeepBest(keep_best, metric, mode)``.

    Attributes:
        keep_last: How many of the newest checkpoints to keep; None keeps all.
        keep_best: How many of the best checkpoints (by ``metric``) to keep as well.
        metric: The metric that ranks checkpoints for ``keep_best``.
        mode: ``"max"`` when larger is better, ``"min"`` when smaller is; needed unless
            ``metric`` is one of :data:`KNOWN_MODES`.
    """

    keep_last: int | None = None
    keep_best: int = 0
    metric: str | None = None
    mode: Literal["max", "min"] | None = None

    def __post_init__(self) -> None:
        """Refuse settings that make no sense."""
        if self.keep_last is not None and self.keep_last < 1:
            raise ValueError(f"keep_last must be at least 1 (or None to keep all), got {self.keep_last}.")
        if self.keep_best < 0:
            raise ValueError(f"keep_best must be >= 0, got {self.keep_best}.")
        if self.keep_best and not self.metric:
            raise ValueError("keep_best needs metric= to rank checkpoints by.")
        if self.metric:
            KeepBest(self.keep_best, self.metric, self.mode)  # refuses an unknown metric without mode=
        elif self.mode not in (None, "max", "min"):
            raise ValueError(f"mode must be 'max' or 'min', got {self.mode!r}.")

    def as_policy(self) -> Policy:
        """The same as composed policies."""
        policy: Policy = KeepAll() if self.keep_last is None else KeepLast(self.keep_last)
        if self.metric:
            # keep_best=0 still records the metric that best() ranks by.
            policy = AnyOf((policy, KeepBest(self.keep_best, self.metric, self.mode)))
        return policy

    def keep(self, entries: Entries) -> set[int]:
        """The steps to keep."""
        return self.as_policy().keep(entries)


def metric_value(metrics: Mapping[str, Any] | None, metric: str) -> float | None:
    """The metric as a float, or None when absent or not a finite number."""
    if not metrics or metric not in metrics:
        return None
    value = metrics[metric]
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def best_steps(
    entries: Sequence[tuple[int, Mapping[str, Any] | None]], metric: str, mode: str, count: int
) -> list[int]:
    """The ``count`` best steps by ``metric``; ties go to the newer step."""
    scored = [(v, step) for step, m in entries if (v := metric_value(m, metric)) is not None]
    sign = -1.0 if mode == "max" else 1.0
    scored.sort(key=lambda vs: (sign * vs[0], -vs[1]))
    return [step for _, step in scored[:count]]


def steps_to_keep(
    entries: Entries,
    policy: Policy,
    *,
    verified: Mapping[int, bool | None] | None = None,
) -> set[int]:
    """The steps to keep among ``entries`` (step, metrics) of committed checkpoints.

    The ones ``policy`` asks for and, from ``verified`` (step -> True: it verifies, False: it
    is damaged, None: it could not be checked), the newest step that verifies and every step
    that could not be checked: retention never deletes the newest checkpoint that verifies,
    nor one it cannot tell apart from it.
    """
    keep = policy.keep(entries)
    if verified:
        good = [step for step, ok in verified.items() if ok]
        if good:
            keep.add(max(good))
        keep.update(step for step, ok in verified.items() if ok is None)
    return keep


def next_to_verify(
    entries: Entries,
    policy: Policy,
    verified: Mapping[int, bool | None],
) -> int | None:
    """The step to verify next before deleting, or None when deleting is safe as it stands.

    Deleting is safe once the newest checkpoint that verifies is known to be kept: checking
    goes from the newest step down, stops at the first that verifies, and never goes below
    the oldest step that would be deleted (anything older is kept anyway). ``verified``
    holds the verdicts so far (see :func:`steps_to_keep`).
    """
    keep = steps_to_keep(entries, policy, verified=verified)
    doomed = [step for step, _ in entries if step not in keep]
    if not doomed:
        return None
    lowest = min(doomed)
    for step in sorted((step for step, _ in entries), reverse=True):
        if step < lowest:
            return None
        if step not in verified:
            return step
        if verified[step]:
            return None
    return None

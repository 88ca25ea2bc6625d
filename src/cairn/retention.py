"""Which checkpoints to keep: pure functions, tested without I/O."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal


@dataclass(frozen=True)
class RetentionPolicy:
    """Keep the ``keep_last`` newest checkpoints and the ``keep_best`` best by ``metric``.

    Attributes:
        keep_last: How many of the newest checkpoints to keep; None keeps all.
        keep_best: How many of the best checkpoints (by ``metric``) to keep as well.
        metric: The metric that ranks checkpoints for ``keep_best``.
        mode: ``"max"`` when larger is better, ``"min"`` when smaller is.
    """

    keep_last: int | None = None
    keep_best: int = 0
    metric: str | None = None
    mode: Literal["max", "min"] = "max"

    def __post_init__(self) -> None:
        """Refuse settings that make no sense."""
        if self.keep_last is not None and self.keep_last < 1:
            raise ValueError(f"keep_last must be at least 1 (or None to keep all), got {self.keep_last}.")
        if self.keep_best < 0:
            raise ValueError(f"keep_best must be >= 0, got {self.keep_best}.")
        if self.keep_best and not self.metric:
            raise ValueError("keep_best needs metric= to rank checkpoints by.")
        if self.mode not in ("max", "min"):
            raise ValueError(f"mode must be 'max' or 'min', got {self.mode!r}.")


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
    entries: Sequence[tuple[int, Mapping[str, Any] | None]],
    policy: RetentionPolicy,
    *,
    verified: Mapping[int, bool | None] | None = None,
) -> set[int]:
    """The steps to keep among ``entries`` (step, metrics) of committed checkpoints.

    The ones ``policy`` asks for and, from ``verified`` (step -> True: it verifies, False: it
    is damaged, None: it could not be checked), the newest step that verifies and every step
    that could not be checked: retention never deletes the newest checkpoint that verifies,
    nor one it cannot tell apart from it.
    """
    steps = sorted(step for step, _ in entries)
    keep = set(steps if policy.keep_last is None else steps[-policy.keep_last :])
    if policy.keep_best and policy.metric:
        keep.update(best_steps(entries, policy.metric, policy.mode, policy.keep_best))
    if verified:
        good = [step for step, ok in verified.items() if ok]
        if good:
            keep.add(max(good))
        keep.update(step for step, ok in verified.items() if ok is None)
    return keep


def next_to_verify(
    entries: Sequence[tuple[int, Mapping[str, Any] | None]],
    policy: RetentionPolicy,
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

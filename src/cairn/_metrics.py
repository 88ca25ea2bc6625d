"""Metrics as flat JSON-ready rows: one home for the rule the manager and ``cairn train`` share.

A checkpoint's recorded metrics (:meth:`cairn.manager.CheckpointManager.save`) and a row of
``metrics.jsonl`` (:mod:`cairn.cli.metrics_log`) are the same thing: the metrics flattened to
``"/"``-joined keys, with only JSON scalars kept. Both used to carry their own copy of this
code, and the copies had drifted (one dropped numpy integers and ``float32`` values).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

__all__ = ["flat_metrics", "jsonable_metrics"]


def flat_metrics(metrics: Mapping[str, Any]) -> dict[str, Any]:
    """``metrics`` with nested dicts flattened to ``"/"``-joined keys.

    A ``train()`` result (:class:`~cairn.rl.algorithms.results.ResultDict`) flattens itself
    with ``flatten(aliases=True)``, which adds its deprecated flat names
    (``episode_return_mean``), so that ``KeepBest(1, "episode_return_mean")`` and plots of
    older runs go on reading them.
    """
    flatten = getattr(metrics, "flatten", None)
    if callable(flatten):
        flat: dict[str, Any] = flatten(aliases=True)
        return flat
    out: dict[str, Any] = {}
    for key, value in metrics.items():
        if isinstance(value, Mapping):
            out.update({f"{key}/{k}": v for k, v in flat_metrics(value).items()})
        else:
            out[key] = value
    return out


def jsonable_metrics(metrics: Mapping[str, Any] | None) -> dict[str, Any]:
    """The JSON-ready part of ``metrics`` under flat keys (:func:`flat_metrics`).

    Numbers, booleans, strings and ``None`` are kept; numpy scalars become Python
    numbers; non-finite floats become ``None`` (JSON has no NaN); values of other
    types (arrays, objects) are left out.
    """
    out: dict[str, Any] = {}
    for key, value in flat_metrics(metrics or {}).items():
        if isinstance(value, np.generic):
            value = value.item()
        if isinstance(value, bool | int | str) or value is None:
            out[str(key)] = value
        elif isinstance(value, float):
            out[str(key)] = value if math.isfinite(value) else None
    return out

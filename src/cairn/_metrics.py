"""Metrics as flat JSON-ready rows: one home for the rule the manager and ``cairn train`` share.

A checkpoint's recorded metrics (:meth:`cairn.manager.CheckpointManager.save`) and a row of
``metrics.jsonl`` (:mod:`cairn.cli.metrics_log`) are the same thing: the metrics flattened to
``"/"``-joined keys, with only JSON scalars kept (numpy integers and ``float32`` values too).
:func:`current_metric_names` reads the names older runs recorded, in one place.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

__all__ = ["RETURN_METRIC", "SETTINGS_KEYS", "current_metric_names", "flat_metrics", "jsonable_metrics"]

RETURN_METRIC = "env_runners/episode_return_mean"
"""The mean episode return of a ``train()`` result, flattened: what ``cairn train`` keeps the best
checkpoint by, ``cairn ls`` ranks by and ``cairn plot`` draws in its main panel."""

# The flat names cairn's train() results had before they took RLlib's nested names (issue 37): the
# env runners' statistics at the top, "learner/<module>/...", "env_runner/<module>/episode_return_mean"
# and "perf/iteration_time_s". Only current_metric_names reads them.
_OLD_ENV_RUNNER_NAMES = frozenset(
    {
        "episode_return_mean",
        "episode_return_min",
        "episode_return_max",
        "episode_len_mean",
        "num_episodes",
        "num_episodes_lifetime",
        "num_env_steps_sampled",
        "num_agent_steps_sampled",
        "num_agent_steps_sampled_lifetime",
    }
)


def _current_name(name: str) -> str:
    if name in _OLD_ENV_RUNNER_NAMES:
        return f"env_runners/{name}"
    if name == "perf/iteration_time_s":
        return "timers/training_iteration"
    parts = name.split("/")
    if parts[0] == "learner" and len(parts) > 1:
        return "/".join(("learners", *parts[1:]))
    if parts[0] == "env_runner" and len(parts) == 3 and parts[2] == "episode_return_mean":
        return f"env_runners/module_episode_returns_mean/{parts[1]}"
    return name


def current_metric_names(flat: Mapping[str, Any]) -> dict[str, Any]:
    """A recorded row of ``train()`` results (``"/"``-joined names) under the names cairn gives them now.

    The one place the names of older runs are read: ``metrics.jsonl`` rows (``cairn plot``) and
    checkpoints' recorded metrics (``cairn ls``, the manager's rankings). ``episode_return_mean``
    -> ``env_runners/episode_return_mean`` (the other episode statistics and step counters alike),
    ``learner/<module>/<stat>`` -> ``learners/<module>/<stat>``,
    ``env_runner/<module>/episode_return_mean`` -> ``env_runners/module_episode_returns_mean/<module>``,
    ``perf/iteration_time_s`` -> ``timers/training_iteration``. Only rows of ``train()`` results
    are renamed (they carry ``training_iteration``): a training loop's own metrics keep the names
    it chose. Rows of issue 28 to 37 carry both names: the current one's value wins.
    To be removed on 2027-06-01: by then runs and checkpoints recorded before the rename are gone.
    """
    out = dict(flat)
    if "training_iteration" not in flat:
        return out
    for name, value in flat.items():
        current = _current_name(name)
        if current != name:
            del out[name]
            out.setdefault(current, value)
    return out


SETTINGS_KEYS = frozenset({"config"})
"""Top-level keys of a ``train()`` result that hold settings, not metrics (RLlib's result carries the
config, as Tune's does; Tune's loggers leave it out too): no metrics row or tracker gets them."""


def flat_metrics(metrics: Mapping[str, Any]) -> dict[str, Any]:
    """``metrics`` with nested dicts flattened to ``"/"``-joined keys (a ``train()`` result's paths),
    without :data:`SETTINGS_KEYS`."""
    return _flat({k: v for k, v in metrics.items() if k not in SETTINGS_KEYS})


def _flat(metrics: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in metrics.items():
        if isinstance(value, Mapping):
            out.update({f"{key}/{k}": v for k, v in _flat(value).items()})
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

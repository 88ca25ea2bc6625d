"""The result of ``Algorithm.train()`` in RLlib's nested layout, one name per value.

``train()`` returns a :class:`ResultDict`, a plain ``dict`` nested as RLlib's::

    {
        "env_runners": {"episode_return_mean": ..., "episode_return_min": ..., "episode_return_max": ...,
                        "episode_len_mean": ..., "num_episodes": ..., "num_episodes_lifetime": ...,
                        "num_env_steps_sampled": ..., "num_env_steps_sampled_lifetime": ...,
                        "num_agent_steps_sampled": ..., "num_agent_steps_sampled_lifetime": ...,
                        "module_episode_returns_mean": {module_id: ...},
                        "agent_episode_returns_mean": {"default_agent": ...},   # single-agent envs
                        ...what the env runners' callbacks logged},
        "learners": {module_id: {...loss statistics...}, "__all_modules__": {...sums...}},
        "timers": {"training_iteration": seconds},
        "evaluation": {"env_runners": {...}},          # iterations that ran an evaluation
        "training_iteration": ..., "num_env_steps_sampled_lifetime": ...,
        "num_training_step_calls_per_iteration": 1,
        ...what the algorithm's callbacks logged, at their keys
    }

The keys are the constants of :mod:`cairn.rl.utils.metrics` (RLlib's strings).

Lookups (``[]``, ``get``, ``in``) also take a ``"a/b/c"`` path. Iterating gives the nested
keys; :meth:`ResultDict.flatten` gives ``"/"``-joined keys, for loggers. Every value has one
name: the learners and env runners emit these paths at the source; old ``metrics.jsonl``
files and checkpoints are read through :func:`cairn._metrics.current_metric_names`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from cairn._metrics import SETTINGS_KEYS
from cairn.registry import object_path
from cairn.rl.utils.metrics.constants import (
    AGENT_EPISODE_RETURNS_MEAN,
    ALL_MODULES,
    ENV_RUNNER_RESULTS,
    EPISODE_RETURN_MEAN,
    LEARNER_RESULTS,
    MODULE_EPISODE_RETURNS_MEAN,
    NUM_MODULE_STEPS_TRAINED,
    NUM_MODULE_STEPS_TRAINED_LIFETIME,
    TIMERS,
)

__all__ = ["WALL_CLOCK_PREFIXES", "ResultDict", "merge_training_step_results", "nest_results", "settings_view"]

WALL_CLOCK_PREFIXES = (f"{TIMERS}/", "perf/")
"""Flattened keys with these prefixes are wall-clock measurements: they differ from run to run."""

_MISSING = object()


def _at(nested: Mapping[str, Any], path: tuple[str, ...]) -> Any:
    node: Any = nested
    for part in path:
        if not isinstance(node, Mapping) or part not in node:
            return _MISSING
        node = node[part]
    return node


class ResultDict(dict[str, Any]):
    """A ``train()`` / ``evaluate()`` result: RLlib's nested dict, also read by ``"a/b/c"`` path.

    It is a plain ``dict`` for everything else (``json.dumps``, ``copy.deepcopy``, pickling
    for Ray and Tune, ``==``). A lookup with a string key that is not one of its own keys
    follows it as a ``"/"``-joined path (``result["env_runners/episode_return_mean"]``).
    """

    def _find(self, key: Any) -> Any:
        if dict.__contains__(self, key):
            return dict.__getitem__(self, key)
        if not isinstance(key, str):
            return _MISSING
        return _at(self, tuple(key.split("/"))) if "/" in key else _MISSING

    def __getitem__(self, key: Any) -> Any:
        found = self._find(key)
        if found is _MISSING:
            raise KeyError(key)
        return found

    def __contains__(self, key: object) -> bool:
        return self._find(key) is not _MISSING

    def get(self, key: Any, default: Any = None) -> Any:
        """The value at ``key`` (a key or a ``"a/b"`` path), else ``default``."""
        found = self._find(key)
        return default if found is _MISSING else found

    def copy(self) -> ResultDict:
        """A shallow copy that is a :class:`ResultDict` too (paths keep working)."""
        return ResultDict(self)

    def flatten(self, *, wall_clock: bool = True) -> dict[str, Any]:
        """The values under ``"/"``-joined keys (``"env_runners/episode_return_mean"``), sorted.

        Args:
            wall_clock: ``False`` leaves out the wall-clock measurements (``timers/``,
                ``perf/``), which differ from run to run: what is left is reproducible.

        The settings under ``config`` are values of no metric: they are left out.
        """
        out: dict[str, Any] = {}

        def walk(node: Mapping[str, Any], prefix: str) -> None:
            for name, value in node.items():
                if isinstance(value, Mapping):
                    walk(value, f"{prefix}{name}/")
                else:
                    out[f"{prefix}{name}"] = value

        walk({k: v for k, v in self.items() if k not in SETTINGS_KEYS}, "")
        if not wall_clock:
            out = {k: v for k, v in out.items() if not k.startswith(WALL_CLOCK_PREFIXES)}
        return dict(sorted(out.items()))


def _place(nested: dict[str, Any], path: tuple[str, ...], value: Any, *, source: str) -> None:
    node = nested
    for depth, part in enumerate(path[:-1]):
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ValueError(
                f"Result key {source!r} needs {'/'.join(path[: depth + 1])!r} to be a section, but a value was "
                "logged there (by a callback?): log one of them under another name."
            )
        node = child
    if isinstance(node.get(path[-1]), dict):
        raise ValueError(
            f"Result key {source!r} is a value where {'/'.join(path)!r} is a section of other results: "
            "log it under another name."
        )
    node[path[-1]] = value


def nest_results(flat: Mapping[str, Any], *, single_agent_module: str | None = None) -> ResultDict:
    """RLlib's nested result from its ``"/"``-joined paths (``"learners/p/vf_loss"``, ``"env_runners/..."``).

    Args:
        flat: ``"/"``-joined result paths, as the learners, env runners and callbacks emit them.
        single_agent_module: The module id when one agent plays one module (a gymnasium env):
            then that module's and that agent's return means are the episode return mean.
    """
    nested: dict[str, Any] = {}
    for key, value in flat.items():
        _place(nested, tuple(key.split("/")), value, source=key)
    runners = nested.get(ENV_RUNNER_RESULTS)
    if single_agent_module is not None and isinstance(runners, dict) and EPISODE_RETURN_MEAN in runners:
        mean = runners[EPISODE_RETURN_MEAN]
        runners.setdefault(MODULE_EPISODE_RETURNS_MEAN, {}).setdefault(single_agent_module, mean)
        runners.setdefault(AGENT_EPISODE_RETURNS_MEAN, {}).setdefault("default_agent", mean)
    learners = nested.get(LEARNER_RESULTS)
    if isinstance(learners, dict):
        sums: dict[str, Any] = {}
        for stat in (NUM_MODULE_STEPS_TRAINED, NUM_MODULE_STEPS_TRAINED_LIFETIME):
            values = [
                m[stat] for mid, m in learners.items() if mid != ALL_MODULES and isinstance(m, dict) and stat in m
            ]
            if values:
                sums[stat] = sum(values)
        if sums:
            learners.setdefault(ALL_MODULES, {}).update(sums)
    return ResultDict(_sorted(nested))


def _sorted(node: dict[str, Any]) -> dict[str, Any]:
    return {k: _sorted(v) if isinstance(v, dict) else v for k, v in sorted(node.items())}


def settings_view(value: Any) -> Any:
    """``value`` (a config's ``to_dict()``) as JSON data, for ``result["config"]``: what a result
    holds goes to JSON logs and through pickling, so classes and functions appear as their
    ``"module:qualname"`` and other objects as their ``repr`` (a view to read, not to rebuild from)."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, Mapping):
        return {str(k): settings_view(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        items = sorted(value, key=repr) if isinstance(value, set | frozenset) else value
        return [settings_view(v) for v in items]
    if isinstance(value, type) or (callable(value) and hasattr(value, "__qualname__")):
        return object_path(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
        return {"type": object_path(type(value)), **settings_view(fields)}
    return repr(value)


def merge_training_step_results(earlier: Mapping[str, Any], latest: Mapping[str, Any]) -> dict[str, Any]:
    """The flat results of an iteration's training steps so far (``min_sample_timesteps_per_iteration``):
    the modules' trained-step counts (``.../num_module_steps_trained``) add up, every other value is
    the latest step's (losses, rates, and lifetime counts, which already hold the earlier steps)."""
    merged = {**earlier, **latest}
    for key, value in latest.items():
        if key.rsplit("/", 1)[-1] == NUM_MODULE_STEPS_TRAINED and key in earlier:
            merged[key] = earlier[key] + value
    return merged

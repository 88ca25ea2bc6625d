"""The result of ``Algorithm.train()`` in RLlib's nested layout, with cairn's old flat names as aliases.

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

Old names keep working for one release (deprecated; docs/rllib_parity.md lists them):
``result["episode_return_mean"]`` (now ``env_runners/episode_return_mean``),
``result["learner/<module>/lr"]`` (``learners/<module>/lr``),
``result["env_runner/<module>/episode_return_mean"]``
(``env_runners/module_episode_returns_mean/<module>``), ``result["num_env_steps_sampled"]``
and ``result["perf/iteration_time_s"]`` (``timers/training_iteration``). Lookups
(``[]``, ``get``, ``in``) also take a ``"a/b/c"`` path. Iterating gives the nested
keys; :meth:`ResultDict.flatten` gives ``"/"``-joined keys, for loggers.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cairn.rl.utils.metrics.constants import (
    AGENT_EPISODE_RETURNS_MEAN,
    ALL_MODULES,
    ENV_RUNNER_RESULTS,
    EPISODE_LEN_MEAN,
    EPISODE_RETURN_MAX,
    EPISODE_RETURN_MEAN,
    EPISODE_RETURN_MIN,
    LEARNER_RESULTS,
    MODULE_EPISODE_RETURNS_MEAN,
    NUM_AGENT_STEPS_SAMPLED,
    NUM_AGENT_STEPS_SAMPLED_LIFETIME,
    NUM_ENV_STEPS_SAMPLED,
    NUM_ENV_STEPS_SAMPLED_LIFETIME,
    NUM_EPISODES,
    NUM_EPISODES_LIFETIME,
    NUM_MODULE_STEPS_TRAINED,
    NUM_MODULE_STEPS_TRAINED_LIFETIME,
    TIMERS,
    TRAINING_ITERATION_TIMER,
)

__all__ = ["FLAT_ALIASES", "WALL_CLOCK_PREFIXES", "ResultDict", "nest_results"]

_ENV_RUNNER_KEYS = (
    EPISODE_RETURN_MEAN,
    EPISODE_RETURN_MIN,
    EPISODE_RETURN_MAX,
    EPISODE_LEN_MEAN,
    NUM_EPISODES,
    NUM_EPISODES_LIFETIME,
    NUM_ENV_STEPS_SAMPLED,
    NUM_AGENT_STEPS_SAMPLED,
    NUM_AGENT_STEPS_SAMPLED_LIFETIME,
)

FLAT_ALIASES: dict[str, tuple[str, ...]] = {
    **{name: (ENV_RUNNER_RESULTS, name) for name in _ENV_RUNNER_KEYS},
    "perf/iteration_time_s": (TIMERS, TRAINING_ITERATION_TIMER),
}
"""Old flat result name -> its path in the nested result (deprecated names, kept for one release).

Besides these, ``learner/<rest>`` is ``learners/<rest>`` and ``env_runner/<module>/episode_return_mean``
is ``env_runners/module_episode_returns_mean/<module>``."""

WALL_CLOCK_PREFIXES = (f"{TIMERS}/", "perf/")
"""Flattened keys with these prefixes are wall-clock measurements: they differ from run to run."""

_MISSING = object()


def _alias_path(key: str) -> tuple[str, ...] | None:
    """The nested path an old flat name stands for, or None."""
    if key in FLAT_ALIASES:
        return FLAT_ALIASES[key]
    parts = tuple(key.split("/"))
    if parts[0] == "learner" and len(parts) > 1:
        return (LEARNER_RESULTS, *parts[1:])
    if parts[0] == "env_runner" and len(parts) == 3 and parts[2] == EPISODE_RETURN_MEAN:
        return (ENV_RUNNER_RESULTS, MODULE_EPISODE_RETURNS_MEAN, parts[1])
    return None


def _at(nested: Mapping[str, Any], path: tuple[str, ...]) -> Any:
    node: Any = nested
    for part in path:
        if not isinstance(node, Mapping) or part not in node:
            return _MISSING
        node = node[part]
    return node


class ResultDict(dict[str, Any]):
    """A ``train()`` / ``evaluate()`` result: RLlib's nested dict, also read by path and by old flat name.

    It is a plain ``dict`` for everything else (``json.dumps``, ``copy.deepcopy``, pickling
    for Ray and Tune, ``==``). Lookups with a key that is not one of its own keys try, in
    order, the ``"a/b/c"`` path, then the old flat names (module docstring).
    """

    def _find(self, key: Any) -> Any:
        if dict.__contains__(self, key):
            return dict.__getitem__(self, key)
        if not isinstance(key, str):
            return _MISSING
        found = _at(self, tuple(key.split("/"))) if "/" in key else _MISSING
        if found is _MISSING:
            path = _alias_path(key)
            if path is not None:
                found = _at(self, path)
        return found

    def __getitem__(self, key: Any) -> Any:
        found = self._find(key)
        if found is _MISSING:
            raise KeyError(key)
        return found

    def __contains__(self, key: object) -> bool:
        return self._find(key) is not _MISSING

    def get(self, key: Any, default: Any = None) -> Any:
        """The value at ``key`` (a key, a ``"a/b"`` path or an old flat name), else ``default``."""
        found = self._find(key)
        return default if found is _MISSING else found

    def copy(self) -> ResultDict:
        """A shallow copy that is a :class:`ResultDict` too (paths and old names keep working)."""
        return ResultDict(self)

    def flatten(self, *, wall_clock: bool = True, aliases: bool = False) -> dict[str, Any]:
        """The values under ``"/"``-joined keys (``"env_runners/episode_return_mean"``), sorted.

        Args:
            wall_clock: ``False`` leaves out the wall-clock measurements (``timers/``,
                ``perf/``), which differ from run to run: what is left is reproducible.
            aliases: Also give each value under its old flat name (``episode_return_mean``,
                ``learner/<module>/...``; deprecated), for logs and rankings that read them.
        """
        out: dict[str, Any] = {}

        def walk(node: Mapping[str, Any], prefix: str) -> None:
            for name, value in node.items():
                if isinstance(value, Mapping):
                    walk(value, f"{prefix}{name}/")
                else:
                    out[f"{prefix}{name}"] = value

        walk(self, "")
        if aliases:
            out.update(_old_names(out))
        if not wall_clock:
            out = {k: v for k, v in out.items() if not k.startswith(WALL_CLOCK_PREFIXES)}
        return dict(sorted(out.items()))


def _old_names(flat: Mapping[str, Any]) -> dict[str, Any]:
    """The deprecated flat names of the values of ``flat`` (``"/"``-joined new keys) that have one."""
    paths = {"/".join(path): old for old, path in FLAT_ALIASES.items()}
    module_returns = f"{ENV_RUNNER_RESULTS}/{MODULE_EPISODE_RETURNS_MEAN}/"
    old: dict[str, Any] = {}
    for key, value in flat.items():
        if key in paths:
            old[paths[key]] = value
        elif key.startswith(f"{LEARNER_RESULTS}/") and not key.startswith(f"{LEARNER_RESULTS}/{ALL_MODULES}/"):
            old["learner/" + key[len(LEARNER_RESULTS) + 1 :]] = value
        elif key.startswith(module_returns):
            old[f"env_runner/{key[len(module_returns) :]}/{EPISODE_RETURN_MEAN}"] = value
    return {k: v for k, v in old.items() if k not in flat}


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


def _path_of(key: str) -> tuple[str, ...]:
    path = _alias_path(key)
    return path if path is not None else tuple(key.split("/"))


def nest_results(flat: Mapping[str, Any], *, single_agent_module: str | None = None) -> ResultDict:
    """RLlib's nested result from cairn's flat one (``"learner/p/lr"``, ``"episode_return_mean"``, ...).

    Args:
        flat: ``"/"``-joined keys; old flat names go to their RLlib place (:data:`FLAT_ALIASES`).
        single_agent_module: The module id when one agent plays one module (a gymnasium env):
            then that module's and that agent's return means are the episode return mean.
    """
    nested: dict[str, Any] = {}
    for key, value in flat.items():
        _place(nested, _path_of(key), value, source=key)
        if key == NUM_ENV_STEPS_SAMPLED_LIFETIME:  # RLlib has it at the top and under env_runners
            _place(nested, (ENV_RUNNER_RESULTS, key), value, source=key)
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

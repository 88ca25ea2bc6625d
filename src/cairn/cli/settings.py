"""What ``cairn train`` makes of ``--set KEY=VALUE`` and ``--env``.

``--set`` takes what the Python builders take (:meth:`AlgorithmConfig.update_from_dict`):
RLlib's setting names (``train_batch_size_per_learner``, ``lambda_``,
``rollout_fragment_length``, ``metrics_num_episodes_for_smoothing``, ...) and cairn's
config fields (``lr``, ``rollout_length``, ...), each applied by the builder RLlib
puts it in, so that ``--set`` and ``PPOConfig().training(...)`` give equal configs.
A name that is neither is refused with the closest names; a value of the wrong type
for a field is refused with the field's default as an example.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from typing import Any

from cairn.cli.command import did_you_mean

__all__ = ["BUILDERS", "apply_settings", "check_env", "parse_settings", "setting_names"]

BUILDERS = (
    "environment",
    "env_runners",
    "learners",
    "training",
    "multi_agent",
    "rl_module",
    "callbacks",
    "reporting",
    "debugging",
    "resources",
    "framework",
    "api_stack",
    "fault_tolerance",
    "evaluation",
)
"""RLlib's config builders, whose setting names ``--set`` takes."""


def setting_names(config_cls: type[Any]) -> tuple[list[str], list[str]]:
    """The config's field names and the RLlib setting names its builders take (each sorted)."""
    fields = sorted(f.name for f in dataclasses.fields(config_cls) if f.init)
    rllib: set[str] = set()
    for builder in BUILDERS:
        rllib.update(config_cls._rules(builder))
    return fields, sorted(rllib - set(fields))


def parse_settings(pairs: list[str], config_cls: type[Any]) -> dict[str, Any]:
    """Turn ``--set KEY=VALUE`` pairs into settings for :func:`apply_settings`, in the order given.

    VALUE is read as JSON when it parses (``1e-3``, ``true``, ``[64, 64]``, ``null``,
    ``{"agent_0": "p0"}``), else taken as a string. For a config field, a list becomes a
    tuple where the field holds a tuple, an int a float where it holds a float, and a value
    of another type than the field's default is refused. RLlib's names are handed to the
    builders as read, which check them.

    Raises:
        ValueError: A pair without ``=``, an unknown name (with the closest ones), or a value
            that does not fit its field.
    """
    fields, rllib = setting_names(config_cls)
    defaults = config_cls()
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, text = pair.partition("=")
        key = key.strip()
        if key not in fields and key not in rllib:
            key = key.replace("-", "_")  # --set rollout-length=16, as a flag would be spelled
        if not sep or not key:
            raise ValueError(f"--set {pair!r}: expected KEY=VALUE, e.g. --set lr=1e-3.")
        if key not in fields and key not in rllib:
            raise ValueError(
                f"--set {key}: {config_cls.__name__} has no setting {key!r}"
                f"{did_you_mean(key, [*fields, *rllib])}. --set takes the config's fields and RLlib's "
                "setting names (docs/rllib_parity.md lists them; `cairn train --help` says how to see the fields)."
            )
        try:
            value: Any = json.loads(text)
        except json.JSONDecodeError:
            value = text
        except (RecursionError, ValueError) as err:  # nested too deeply; an integer of too many digits
            raise ValueError(f"--set {key}: the value cannot be read ({type(err).__name__}: {err}).") from err
        if key in fields:
            value = _fit(key, value, getattr(defaults, key), text)
        out[key] = value
    return out


def _fit(key: str, value: Any, default: Any, text: str) -> Any:
    """``value`` converted to the kind of the field's ``default``; ValueError when it is of another kind."""
    if default is None or value is None:
        return value  # an optional field (None by default), or one set to None: the config checks it
    want: tuple[type, ...]
    if isinstance(default, bool):
        want, kind = (bool,), "true or false"
    elif isinstance(default, int):
        want, kind = (int,), "an integer"
    elif isinstance(default, float):
        want, kind = (int, float), "a number"
    elif isinstance(default, str):
        want, kind = (str,), "a string"
    elif isinstance(default, tuple | list):
        want, kind = (list, tuple), "a JSON list"
    elif isinstance(default, dict):
        want, kind = (dict,), "a JSON object"
    else:
        return value
    if not isinstance(value, want) or (isinstance(value, bool) and bool not in want):
        example = json.dumps(list(default) if isinstance(default, tuple) else default, default=str)
        raise ValueError(f"--set {key}={text[:80]}: {key} takes {kind}, e.g. --set {key}={example[:80]} (its default).")
    if isinstance(default, tuple) and isinstance(value, list):
        return tuple(value)
    if isinstance(default, float) and isinstance(value, int):
        return float(value)
    return value


def apply_settings(config: Any, settings: dict[str, Any]) -> Any:
    """A copy of ``config`` with ``settings`` applied through its builders (RLlib's names and cairn's fields).

    Raises:
        ValueError: A setting the builders refuse (their message names it and says why).
    """
    out = copy.deepcopy(config)
    try:
        return out.update_from_dict(settings)
    except TypeError as err:  # a config check meeting a value of a kind it does not compare
        names = ", ".join(settings)
        raise ValueError(f"--set/options {names}: {err}") from err


def check_env(env: str) -> None:
    """Raise ValueError when ``env`` names no environment gymnasium or :func:`register_env` knows.

    Ids with a module (``mypkg.envs:MyEnv-v0``) are left to the config's own check, which
    needs the module imported (``cairn --import mypkg.envs``).
    """
    import gymnasium

    from cairn.rl.env.multi_agent_env import (
        MULTI_AGENT_PREFIX,
        multi_agent_env_creator,
        parse_env,
        single_agent_env_creator,
    )

    env_id, multi = parse_env(env)
    if ":" in env_id or env_id in gymnasium.registry:
        return
    if single_agent_env_creator(env_id) is not None or multi_agent_env_creator(env_id) is not None:
        return
    prefix = MULTI_AGENT_PREFIX if multi else ""
    hint = did_you_mean(env_id, gymnasium.registry)
    if hint:
        hint = hint.replace("(did you mean ", f"(did you mean {prefix}").replace(" or ", f" or {prefix}")
    raise ValueError(
        f"--env {env}: no such environment{hint}. Give a gymnasium id "
        "(python -c 'import gymnasium; gymnasium.pprint_registry()' lists them), or --import the module "
        "that registers yours and name it module:EnvName."
    )

"""How a config records the callables it holds: by reference (``"module:qualname"``), never pickled.

A function no path names (a lambda, a closure) is kept live as an
:class:`~cairn.registry.Unrecorded` that a load passes back (issue 39); a connector factory
is recorded as ``{"ref": ..., "kwargs": ...}`` with plain-data keyword arguments.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from cairn._unrecorded import SCOPE, unrecorded
from cairn.registry import (
    Unrecorded,
    function_problem,
    register_passed,
)
from cairn.rl.config.callback_forms import (
    CALLBACK_HOOKS,
    callback_functions,
    function_field,
)
from cairn.rl.config.env_creators import ENV_ROLE, creator_for, env_creator_setting

__all__ = ["CONNECTOR_FIELDS", "connector_reference", "function_reference", "kept_callables"]


CONNECTOR_FIELDS = ("env_to_module_connector", "module_to_env_connector", "learner_connector")
"""The config fields that record a connector factory by reference."""


def function_reference(fn: Any, *, what: str) -> str | Unrecorded:
    """How a config records a function: ``"module:qualname"`` (by reference, never pickled), or an
    :class:`~cairn.registry.Unrecorded` for a callable no path names.

    A string is returned as it is (a ``"module:function"`` path or a name
    registered with :func:`cairn.rl.env.multi_agent_env.register_policy_mapping_fn`);
    it is resolved when an env runner is built, with
    :func:`cairn.registry.resolve_function`, which imports nothing. A lambda, a
    closure, a bound method, a function of ``__main__`` or of the standard library
    and a callable object are kept as they are, in an ``Unrecorded`` for the
    field ``what``: they work in this program (and its Ray workers), and a
    checkpoint records only that they existed (issue 39).

    Raises:
        ValueError: ``fn`` is an empty string or not callable.
    """
    if isinstance(fn, Unrecorded):
        return fn
    if isinstance(fn, str):
        if not fn:
            raise ValueError(f"{what} must be a function or a non-empty 'module:function' reference.")
        return fn
    if not callable(fn):
        raise ValueError(f"{what}={fn!r:.80} is neither a function nor a 'module:function' reference.")
    if function_problem(fn) is not None:
        return unrecorded(fn, what)
    register_passed(fn)  # the program passed it: a checkpoint of this config loads again in this program
    return f"{fn.__module__}:{fn.__qualname__}"


def kept_callables(settings: Mapping[str, Any], scope: str) -> dict[str, Any]:
    """The callable settings among ``settings`` as a config keeps them (the others are left out).

    ``policy_mapping_fn``, the connector factories and the ``callbacks_on_<hook>``
    functions are recorded by reference or kept as :class:`~cairn.registry.Unrecorded`,
    and ``env`` / ``env_creator`` get their creator (:mod:`cairn.rl.config.env_creators`).
    ``scope`` is the dict field ``settings`` belong to, as a role prefix
    (``"evaluation_config"``; ``""`` for the config's own fields): a new process
    passes such a callable back nested the same way
    (``from_checkpoint(path, evaluation_config={"policy_mapping_fn": fn})``).
    """

    def role(name: str) -> str:
        return f"{scope}{SCOPE}{name}" if scope else name

    kept: dict[str, Any] = {}
    if settings.get("policy_mapping_fn") is not None:
        kept["policy_mapping_fn"] = function_reference(settings["policy_mapping_fn"], what=role("policy_mapping_fn"))
    for name in CONNECTOR_FIELDS:
        if name in settings:
            kept[name] = connector_reference(settings[name], what=role(name))
    for hook in CALLBACK_HOOKS:
        name = function_field(hook)
        if name in settings:
            kept[name] = callback_functions(settings[name], hook, role=role(name))
    creator = settings.get("env_creator")
    if creator is not None:
        creator = env_creator_setting(creator, role(ENV_ROLE))["env_creator"]  # a creator given by keyword
    if isinstance(settings.get("env"), str):
        creator = creator_for(settings["env"], creator, role(ENV_ROLE))
    if "env_creator" in settings or creator is not None:
        kept["env_creator"] = creator
    if scope:  # one kept already (a builder's, or the config's own field passed on): recorded under this path
        kept = {
            name: _in_role(value, role(ENV_ROLE if name == "env_creator" else name)) for name, value in kept.items()
        }
    return kept


def _in_role(value: Any, role: str) -> Any:
    """``value`` (a kept callable setting) with each :class:`~cairn.registry.Unrecorded` in it recorded as ``role``."""
    if isinstance(value, Unrecorded):
        return value if value.role == role else replace(value, role=role)
    if isinstance(value, Mapping) and isinstance(value.get("ref"), Unrecorded):
        return {**value, "ref": _in_role(value["ref"], role)}
    if isinstance(value, list):
        return [_in_role(item, role) for item in value]
    return value


_PLAIN = (type(None), bool, int, float, str)


def _plain_data(value: Any, *, where: str) -> Any:
    """``value`` as plain data a config records (tuples as lists), or ``ValueError``."""
    if isinstance(value, _PLAIN):
        return value
    if isinstance(value, list | tuple):
        return [_plain_data(v, where=f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, Mapping) and all(isinstance(k, str) for k in value):
        return {k: _plain_data(v, where=f"{where}[{k!r}]") for k, v in value.items()}
    raise ValueError(
        f"{where}={value!r:.80} cannot be recorded in a config: connector factory arguments must be plain data "
        "(None, bool, int, float, str, and lists and str-keyed dicts of them)."
    )


def connector_reference(factory: Any, *, what: str) -> dict[str, Any] | None:
    """How a config records a connector factory: ``{"ref": "module:QualName", "kwargs": {...}}`` (or None).

    Takes what RLlib users pass (``env_to_module_connector=...``): a function defined at the
    top level of an imported module, a connector class, a ``functools.partial`` of either with
    keyword arguments of plain data, a ``"module:QualName"`` string, or an already recorded
    dict. Nothing is called or imported here; env runners resolve the reference with
    :mod:`cairn.registry` (``cairn.rl.env.connector_building``). A lambda, a closure, a
    bound method or something of ``__main__`` (no path names it) is kept as it is, as
    ``{"ref": Unrecorded(...), "kwargs": {}}``: it works in this program and its Ray
    workers, and a checkpoint records only that it existed (issue 39).

    Raises:
        ValueError: Positional partial arguments, or arguments that are not plain data.
    """
    if factory is None:
        return None
    kwargs: dict[str, Any] = {}
    if isinstance(factory, Mapping):
        ref, kwargs = factory.get("ref"), factory.get("kwargs", {})
        if set(factory) - {"ref", "kwargs"} or not isinstance(ref, str | Unrecorded) or not isinstance(kwargs, Mapping):
            raise ValueError(f"{what}={factory!r:.120} is not a recorded connector factory {{'ref', 'kwargs'}}.")
        factory = ref
    if isinstance(factory, functools.partial):
        if factory.args:
            raise ValueError(
                f"{what}=functools.partial({factory.func!r:.60}, ...) has positional arguments; give them as keywords."
            )
        kwargs, factory = dict(factory.keywords), factory.func
    if isinstance(factory, Unrecorded):
        return {"ref": factory, "kwargs": _plain_data(dict(kwargs), where=f"{what} kwargs")}
    if isinstance(factory, str):
        if ":" not in factory:
            raise ValueError(f"{what}={factory!r:.80} is not a 'module:QualName' reference.")
        return {"ref": factory, "kwargs": _plain_data(dict(kwargs), where=f"{what} kwargs")}
    if not callable(factory):
        raise ValueError(f"{what}={factory!r:.80} is not a connector factory: give a function or a connector class.")
    if isinstance(factory, type):
        nameable = factory.__module__ != "__main__" and "<locals>" not in factory.__qualname__
    else:
        nameable = function_problem(factory) is None
    if not nameable and not isinstance(factory, type) and kwargs:
        # No path names it: kept whole (with the partial's arguments, whatever they are), never recorded.
        return {"ref": unrecorded(functools.partial(factory, **kwargs), what), "kwargs": {}}
    kwargs = _plain_data(dict(kwargs), where=f"{what} kwargs")
    if not nameable:  # no path names it: kept as it is, never recorded (a class keeps its recorded kwargs)
        return {"ref": unrecorded(factory, what), "kwargs": kwargs}
    register_passed(factory)  # the program passed it: this config's checkpoint loads again here
    return {"ref": f"{factory.__module__}:{factory.__qualname__}", "kwargs": kwargs}

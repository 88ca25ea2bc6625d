"""How a config records callbacks: classes, classes with arguments, and per-hook functions.

RLlib's ``config.callbacks(...)`` takes callbacks in three forms, and a cairn
config records each of them by reference, never by value (SPEC 8: a checkpoint
never runs code on load):

- ``callbacks_class=MyCallbacks`` (or a list of classes): recorded as
  ``"module:QualName"``, as before.
- ``callbacks_class=functools.partial(MyCallbacks, threshold=100)``: a
  top-level class with plain-data arguments (None, bool, int, float, str, and
  lists / str-keyed dicts of them). The config turns it into a
  :class:`CallbackClass` (a ``functools.partial``), recorded as the class path
  plus the arguments; a load calls the class with those arguments only after
  the class was resolved through the allow-list (:func:`cairn.registry.resolve`,
  role :data:`~cairn.registry.CALLBACKS_CLASS`: an ``RLlibCallback`` subclass).
- ``on_episode_end=fn`` (one function or a list, for each hook of
  :data:`CALLBACK_HOOKS`): recorded as ``"module:function"`` in the config's
  ``callbacks_on_<hook>`` field, as ``policy_mapping_fn`` is, and resolved
  by :func:`resolve_callback_function` (the allow-list: a function the program
  registered or the load trusted). A lambda, a closure, a bound method or a
  function of ``__main__`` is kept as it is (an :class:`~cairn.registry.Unrecorded`):
  it runs in this program and its Ray workers, a checkpoint records only that it
  existed, and a load in a new process asks for it again (issue 39).

Building a config in code registers the classes and functions it is given
(:func:`cairn.registry.register`), so that the program that saves a checkpoint
loads it again with nothing more to write.

This is a leaf module (it imports only :mod:`cairn.registry` and :mod:`cairn._unrecorded`), so that the
config, the callbacks and the env runners can all import it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

from cairn._unrecorded import unrecorded
from cairn.registry import (
    CALLBACK_FUNCTION,
    CALLBACKS_CLASS,
    Role,
    Unrecorded,
    class_path,
    function_problem,
    object_path,
    register_passed,
    register_type,
    resolve_function,
)

__all__ = [
    "CALLBACK_HOOKS",
    "CallbackClass",
    "callback_functions",
    "callback_names",
    "callbacks_class_value",
    "function_field",
    "resolve_callback_function",
]

CALLBACK_HOOKS: tuple[str, ...] = (
    "on_algorithm_init",
    "on_checkpoint_loaded",
    "on_episode_created",
    "on_episode_start",
    "on_episode_step",
    "on_episode_end",
    "on_sample_end",
    "on_train_result",
    "on_evaluate_start",
    "on_evaluate_end",
    "on_env_runners_recreated",
    "on_environment_created",
)
"""The hooks cairn calls, in RLlib's ``callbacks()`` keyword names; each has a config field
``callbacks_<hook>`` holding the ``"module:function"`` references of its functions."""


def function_field(hook: str) -> str:
    """The config field of ``hook``'s functions (RLlib's attribute name): ``callbacks_on_episode_end``."""
    return f"callbacks_{hook}"


def _plain(value: Any) -> bool:
    """Whether ``value`` is plain data a config records and a checkpoint gives back as it was."""
    if value is None or type(value) in (bool, int, float, str):
        return True
    if type(value) in (list, tuple):
        return all(_plain(v) for v in value)
    if type(value) is dict:
        return all(type(k) is str and _plain(v) for k, v in value.items())
    return False


class CallbackClass(functools.partial):  # type: ignore[type-arg]
    """A callbacks class with constructor arguments, as a config records it (RLlib: ``functools.partial``).

    Built from ``functools.partial(MyCallbacks, *args, **kwargs)`` by the
    config; calling it builds the callbacks, as the partial did. Two are equal
    when they name the same class with the same arguments (a config restored
    from a checkpoint equals the one saved).
    """

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, functools.partial):
            return NotImplemented
        return (self.func, self.args, self.keywords) == (other.func, other.args, other.keywords)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        arguments = [repr(a) for a in self.args] + [f"{k}={v!r}" for k, v in self.keywords.items()]
        name = class_path(self.func) if isinstance(self.func, type) else repr(self.func)
        return f"functools.partial({name}, {', '.join(arguments)})"


def _encode_callback_class(value: CallbackClass) -> dict[str, Any]:
    return {"class": value.func, "args": list(value.args), "kwargs": dict(value.keywords)}


def _decode_callback_class(value: Any) -> CallbackClass:
    # The class was resolved by the codec's class resolver (imported modules only); the arguments must be
    # plain data, so that a file can make cairn call the program's own callbacks class and nothing else.
    if not (isinstance(value, Mapping) and isinstance(value.get("class"), type)):
        raise ValueError("expected {'class': <class>, 'args': [...], 'kwargs': {...}}")
    return _callback_class(value["class"], tuple(value.get("args", ())), dict(value.get("kwargs", {})))


register_type(
    CallbackClass,
    name="cairn.rl.callbacks:CallbackClass",
    encode=_encode_callback_class,
    decode=_decode_callback_class,
)


def _callback_class(cls: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> CallbackClass:
    where = f"callbacks_class=functools.partial({getattr(cls, '__qualname__', repr(cls))!s:.80}, ...)"
    if not isinstance(cls, type) or "<locals>" in cls.__qualname__ or cls.__module__ == "__main__":
        raise ValueError(
            f"{where}: a partial of callbacks must wrap a class defined at the top level of a module you import "
            "(not __main__, not a function's locals), because the config records it by its path."
        )
    problem = CALLBACKS_CLASS.problem(cls)
    if problem is not None:
        raise ValueError(f"{where} is refused: {problem}.")
    register_passed(cls)  # the program passed it: a checkpoint of this config loads again in this program
    for name, value in [*((str(i), a) for i, a in enumerate(args)), *kwargs.items()]:
        if not _plain(value):
            raise ValueError(
                f"{where}: the argument {name!r} is a {type(value).__name__}; the config records arguments as plain "
                "data only (None, bool, int, float, str, and lists or str-keyed dicts of them). Pass what the "
                "class needs to rebuild the value instead."
            )
    return CallbackClass(cls, *args, **kwargs)


def callbacks_class_value(value: Any) -> Any:
    """A ``callbacks_class`` as the config keeps it: partials become :class:`CallbackClass`, lists lists.

    Raises:
        ValueError: A partial of something else than a top-level class, or with
            arguments that are not plain data; a value that is no class, partial or list
            (a string path, say), refused here as RLlib's ``callbacks()`` refuses it, not
            when the algorithm is built.
    """
    if isinstance(value, list | tuple):
        return [callbacks_class_value(v) for v in value]
    if isinstance(value, functools.partial) and not isinstance(value, CallbackClass):
        return _callback_class(value.func, tuple(value.args), dict(value.keywords))
    if value is not None and not isinstance(value, type | CallbackClass):
        raise ValueError(
            f"callbacks_class={value!r:.80} is refused: give the RLlibCallback subclass itself (or a "
            "functools.partial of it, or a list of them), not a name; import the class and pass it."
        )
    if isinstance(value, type) and CALLBACKS_CLASS.problem(value) is None:
        register_passed(value)  # the program passed it: a checkpoint of this config loads again here
    return value


def _reference(fn: Any, hook: str, index: int, role: str) -> str | Unrecorded:
    if isinstance(fn, Unrecorded):
        return fn
    if isinstance(fn, str):
        if ":" not in fn:
            raise ValueError(f"callbacks({hook}={fn!r}): a function is recorded as 'module:function', got {fn!r}.")
        return fn
    if not callable(fn):
        raise ValueError(f"callbacks({hook}={fn!r:.80}): give a function or a 'module:function' path.")
    if function_problem(fn) is not None:
        # A lambda, a closure, a bound method, a function of __main__: kept as it is (it runs in this program
        # and its Ray workers); a checkpoint records only that it existed, and a load asks for it (issue 39).
        return unrecorded(fn, role, index)
    register_passed(fn)  # the program passed it: a checkpoint of this config loads again in this program
    return f"{fn.__module__}:{fn.__qualname__}"


def callback_functions(value: Any, hook: str, *, role: str = "") -> list[str | Unrecorded] | None:
    """A hook's functions as the config keeps them: ``None``, or a list of ``"module:function"`` paths and
    :class:`~cairn.registry.Unrecorded` callables (those no path names), whose role is ``role``
    (default: the hook's field, ``callbacks_on_episode_end``).

    Raises:
        ValueError: Something that is neither callable nor a ``"module:function"`` path.
    """
    if value is None:
        return None
    items = list(value) if isinstance(value, list | tuple) else [value]
    return [_reference(fn, hook, i, role or function_field(hook)) for i, fn in enumerate(items)]


def resolve_callback_function(ref: Any, hook: str) -> Callable[..., Any]:
    """The function a config's ``callbacks_<hook>`` names, through the allow-list; imports nothing.

    Raises:
        cairn.CheckpointError: A name that is not a function the program registered
            (or a load trusted), or a ``__main__`` module.
    """
    return resolve_function(ref, where=f"callbacks({hook}=...)", role=CALLBACK_FUNCTION)


def callback_names(config: Any) -> list[tuple[str, str, Role]]:
    """``(path, field, role)`` of every callbacks class and function of ``config`` (allow-list checks, workers)."""
    names: list[tuple[str, str, Role]] = []
    value = getattr(config, "callbacks_class", None)
    for item in value if isinstance(value, list | tuple) else [value]:
        cls = item.func if isinstance(item, functools.partial) else item
        if isinstance(cls, type):
            names.append((object_path(cls), "callbacks_class", CALLBACKS_CLASS))
    for hook in CALLBACK_HOOKS:
        for ref in getattr(config, function_field(hook), None) or ():
            if not isinstance(ref, Unrecorded):  # a callable no path names is no name to allow
                names.append((ref, f"callbacks({hook}=...)", CALLBACK_FUNCTION))
    return names

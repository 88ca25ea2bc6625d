"""Saving and restoring the inner state of gymnasium environments.

Exact resume needs the environments to continue where they were: the
physics state, the environment's own RNG, the time-limit step counter. Which
attributes make up an environment's state is known for gymnasium's
classic-control environments; other environments can be taught with
:func:`register_env_state_handler`. For environments without a handler,
:func:`get_env_state` returns ``None`` and the env runner records that
episodes restart on restore.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np

from cairn.state_checks import count

__all__ = [
    "EnvStateHandler",
    "env_state_mismatch",
    "env_state_problem",
    "get_env_state",
    "register_env_state_handler",
    "set_env_state",
    "supports_env_state",
]

_CLASSIC_CONTROL_ATTRS: dict[str, tuple[str, ...]] = {
    "CartPoleEnv": ("state", "steps_beyond_terminated"),
    "PendulumEnv": ("state", "last_u"),
    "AcrobotEnv": ("state",),
    "MountainCarEnv": ("state",),
    "Continuous_MountainCarEnv": ("state",),
}


@dataclass(frozen=True)
class EnvStateHandler:
    """How to read and write the state of one environment class (the unwrapped env).

    Attributes:
        get: ``unwrapped env -> state tree`` (cairn state leaves only).
        set: ``(unwrapped env, state tree) -> None``.
    """

    get: Callable[[Any], Any]
    set: Callable[[Any, Any], None]
    check: Callable[[Any, Any], str | None] | None = None
    """``(unwrapped env, state tree) -> why set would refuse or break the env, or None``: run
    before any environment of a restore changes (handlers registered without one are not checked)."""


_HANDLERS: dict[type, EnvStateHandler] = {}


def register_env_state_handler(
    env_class: type,
    get: Callable[[Any], Any],
    set: Callable[[Any, Any], None],
    *,
    check: Callable[[Any, Any], str | None] | None = None,
) -> None:
    """Teach cairn how to save the state of ``env_class`` (an unwrapped env class).

    The env's ``np_random`` and the ``TimeLimit`` counter are saved by cairn
    itself; the handler covers the rest (physics, internal counters).

    Args:
        env_class: The class of ``env.unwrapped``.
        get: Returns the state (cairn state leaves: arrays, numbers, str, lists, dicts).
        set: Applies a state returned by ``get``.
        check: Optional: why a state read from a checkpoint would break the env (wrong
            shapes, NaN where counts go), or None when ``set`` may apply it. A restore asks it
            for every environment before it changes any, so that a refused checkpoint leaves
            them all as they were.
    """
    _HANDLERS[env_class] = EnvStateHandler(get=get, set=set, check=check)


def _encode_value(value: Any) -> dict[str, Any]:
    # Keep exact types: np.float64 is also a Python float, a tuple must stay a tuple.
    if isinstance(value, np.ndarray):
        return {"kind": "array", "value": value.copy()}
    if isinstance(value, np.generic):
        return {"kind": "scalar", "value": np.asarray(value)}
    if isinstance(value, tuple):
        return {"kind": "tuple", "value": [_encode_value(v) for v in value]}
    if isinstance(value, list):
        return {"kind": "list", "value": [_encode_value(v) for v in value]}
    if value is None or isinstance(value, bool | int | float | str):
        return {"kind": "py", "value": value}
    raise TypeError(f"cannot save an environment attribute of type {type(value).__name__}")


def _decode_value(encoded: Any) -> Any:
    kind, value = encoded["kind"], encoded["value"]
    if kind == "array":
        return np.array(value, copy=True)
    if kind == "scalar":
        return np.asarray(value)[()]
    if kind == "tuple":
        return tuple(_decode_value(v) for v in value)
    if kind == "list":
        return [_decode_value(v) for v in value]
    return value


def _attribute_handler(attrs: tuple[str, ...]) -> EnvStateHandler:
    def get(env: Any) -> Any:
        return {name: _encode_value(getattr(env, name)) for name in attrs if hasattr(env, name)}

    def set_(env: Any, state: Any) -> None:
        # Only the attributes this handler saves: a state from a file naming others could set any
        # attribute of the env (render_mode="human" makes the next step import pygame; SPEC 8).
        unknown = [repr(n)[:60] for n in state if n not in attrs] if isinstance(state, dict) else None
        if unknown is None or unknown:
            raise ValueError(
                f"the saved state of {type(env).__qualname__} "
                + ("is not a dict" if unknown is None else f"sets attributes {', '.join(unknown)}")
                + f"; it may set only {list(attrs)}. The checkpoint was written by other code or tampered with."
            )
        for name, encoded in state.items():
            setattr(env, name, _decode_value(encoded))

    def check(env: Any, state: Any) -> str | None:
        if not isinstance(state, dict):
            return "its saved attributes are not a dict"
        for name, encoded in state.items():
            if name not in attrs:
                return f"it sets the attribute {str(name)[:60]!r}, and it may set only {list(attrs)}"
            try:
                value = _decode_value(encoded)
            except (KeyError, TypeError, ValueError) as err:
                return f"its attribute {name!r} is not a saved value ({type(err).__name__}: {err})"
            problem = _value_problem(getattr(env, name, None), value)
            if problem is not None:
                return f"its attribute {name!r} {problem}"
        return None

    return EnvStateHandler(get=get, set=set_, check=check)


def _value_problem(live: Any, saved: Any) -> str | None:
    """Why ``saved`` cannot replace the live attribute value ``live`` (numbers where numbers are, same shapes).

    Arrays, tuples and lists are compared by shape (MountainCar keeps its state as an
    array after a reset and as a tuple after a step) and must hold finite numbers.
    """
    if isinstance(saved, np.ndarray | tuple | list) or isinstance(live, np.ndarray | tuple | list):
        try:
            array = np.asarray(saved)
        except ValueError as err:  # ragged lists
            return f"is not an array of numbers ({err})"
        if not isinstance(saved, np.ndarray | tuple | list) or array.dtype.kind not in "biuf":
            return f"is a {type(saved).__name__} of {array.dtype}, not an array of numbers"
        if isinstance(live, np.ndarray | tuple | list) and array.shape != np.shape(live):
            return f"has shape {array.shape}, the environment's has shape {np.shape(live)}"
        if array.dtype.kind == "f" and not np.isfinite(array).all():
            return "holds NaN or infinite values"
        return None
    if saved is None or (live is None and isinstance(saved, int | float | np.generic)):
        return None  # an attribute that is None until an event (CartPole's steps_beyond_terminated)
    if isinstance(saved, bool | str) or not isinstance(saved, int | float | np.generic):
        return f"is a {type(saved).__name__}, not a number"
    return None


def env_state_problem(env: gym.Env[Any, Any], state: Any) -> str | None:
    """Why :func:`set_env_state` would refuse ``state`` or leave ``env`` unable to step; None when it fits.

    Beyond :func:`env_state_mismatch`: the RNG state must be one the env's bit generator
    takes (tried on a fresh generator, never on the env's), the ``TimeLimit`` counters
    non-negative ints, and the handler's own state what its ``check`` accepts (for
    classic control: only its attributes, of the live shapes, finite).
    """
    problem = env_state_mismatch(env, state)
    if problem is not None:
        return problem
    handler = _handler_for(env)
    assert handler is not None  # env_state_mismatch said there is one
    generator = env.unwrapped.np_random.bit_generator
    try:
        type(generator)().state = state["np_random"]
    except Exception as err:  # numpy raises ValueError, TypeError or KeyError for a foreign state
        return f"its RNG state is not one of {type(generator).__name__} ({type(err).__name__}: {err})"
    steps = state.get("time_limit_steps")
    if not isinstance(steps, list | tuple) or not all(count.fits(n) for n in steps):
        return f"its TimeLimit step counters {steps!r:.80} are not non-negative ints"
    if "env" not in state:
        return "it holds no environment state"
    return None if handler.check is None else handler.check(env.unwrapped, state["env"])


def _handler_for(env: gym.Env[Any, Any]) -> EnvStateHandler | None:
    unwrapped = env.unwrapped
    for klass in type(unwrapped).__mro__:
        if klass in _HANDLERS:
            return _HANDLERS[klass]
    module = type(unwrapped).__module__
    name = type(unwrapped).__name__
    if module.startswith("gymnasium.envs.classic_control") and name in _CLASSIC_CONTROL_ATTRS:
        return _attribute_handler(_CLASSIC_CONTROL_ATTRS[name])
    return None


def supports_env_state(env: gym.Env[Any, Any]) -> bool:
    """Whether :func:`get_env_state` can save this environment."""
    return _handler_for(env) is not None


def _time_limits(env: gym.Env[Any, Any]) -> list[gym.wrappers.TimeLimit[Any, Any]]:
    found = []
    layer: Any = env
    while isinstance(layer, gym.Wrapper):
        if isinstance(layer, gym.wrappers.TimeLimit):
            found.append(layer)
        layer = layer.env
    return found


def get_env_state(env: gym.Env[Any, Any]) -> dict[str, Any] | None:
    """The state of one (wrapped) environment, or ``None`` if it cannot be saved.

    Returns:
        ``{"class": ..., "np_random": bit generator state, "time_limit_steps":
        [...], "env": handler state}``.
    """
    handler = _handler_for(env)
    if handler is None:
        return None
    unwrapped = env.unwrapped
    return {
        "class": f"{type(unwrapped).__module__}:{type(unwrapped).__qualname__}",
        "np_random": unwrapped.np_random.bit_generator.state,
        "time_limit_steps": [tl._elapsed_steps for tl in _time_limits(env)],
        "env": handler.get(unwrapped),
    }


def env_state_mismatch(env: gym.Env[Any, Any], state: Any) -> str | None:
    """Why ``state`` cannot be applied to ``env`` (``None`` when it can)."""
    unwrapped = env.unwrapped
    klass = f"{type(unwrapped).__module__}:{type(unwrapped).__qualname__}"
    if not isinstance(state, dict) or _handler_for(env) is None:
        return f"no saved state can be applied to {klass}"
    if state.get("class") != klass:
        return f"the saved environment state is for {state.get('class')}, not {klass}"
    saved_limits = len(state.get("time_limit_steps", ()))
    if saved_limits != len(_time_limits(env)):
        return f"the saved environment had {saved_limits} TimeLimit wrappers, this one {len(_time_limits(env))}"
    return None


def set_env_state(env: gym.Env[Any, Any], state: dict[str, Any]) -> None:
    """Apply a state from :func:`get_env_state` to an environment that was reset once.

    Raises:
        ValueError: The state belongs to another environment class or wrapper stack.
    """
    problem = env_state_mismatch(env, state)
    handler = _handler_for(env)
    if problem is not None or handler is None:
        raise ValueError(problem)
    unwrapped = env.unwrapped
    limits = _time_limits(env)
    steps = list(state["time_limit_steps"])
    unwrapped.np_random.bit_generator.state = state["np_random"]
    for limit, elapsed in zip(limits, steps, strict=True):
        limit._elapsed_steps = elapsed
    handler.set(unwrapped, state["env"])

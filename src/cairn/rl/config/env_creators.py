"""Environment creators: ``register_env(name, creator)`` and ``environment(creator)`` (issue 39).

RLlib builds an environment from a creator function ``creator(env_config)`` in
two ways: ``tune.register_env("name", creator)`` then ``environment("name")``, or
``environment(creator)`` directly. Both usually pass a lambda or a closure, which
no path names and a checkpoint never records (SPEC 8). So a config keeps the
creator in its ``env_creator`` field, as an :class:`~cairn.registry.Unrecorded`
whose role is ``"env"``:

- ``environment(creator)``: ``env`` becomes the creator's ``__qualname__`` (a label
  for messages, metrics and saved env states) and ``env_creator`` the creator.
- ``environment("name")`` of a name given to :func:`register_env` in this process:
  ``env`` is the name and ``env_creator`` the registered creator (kept in step by
  :func:`creator_for`, each time a config is built).

Env runners build with ``env_creator`` when a config holds one, in this process
and in Ray workers, which get it with the config over Ray's own cloudpickle
channel, from the driver (never from a file). A checkpoint records only that it
existed; a load in a new process takes it again from ``env=creator`` (RLlib's
keyword), or from a :func:`register_env` of the recorded name made before the
load (what an RLlib script does anyway), and otherwise asks for it in the one
:class:`~cairn.errors.MissingCallableError`.

A leaf module (it imports :mod:`cairn._unrecorded` and gymnasium only), so that
the config and the env runners can both import it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym

from cairn._unrecorded import Unrecorded, unrecorded

__all__ = ["ENV_ROLE", "EnvCreator", "creator_for", "env_creator_setting", "live_env_creator", "register_env"]

ENV_ROLE = "env"
"""The role of an env creator in a checkpoint's record, and the keyword that passes it back
(``PPO.from_checkpoint(path, env=creator)``): RLlib's ``environment(env=creator)``."""

EnvCreator = Callable[[dict[str, Any]], gym.Env[Any, Any]]
"""``env_config -> MultiAgentEnv`` or ``env_config -> gymnasium.Env`` (a subclass of either is one)."""

_ENVS: dict[str, EnvCreator] = {}


def register_env(name: str, creator: EnvCreator) -> None:
    """Name an environment, so that ``config.env=name`` builds it (RLlib's ``tune.register_env``).

    ``creator`` is called with the config's ``env_config`` (a dict) and returns
    a :class:`~cairn.rl.env.multi_agent_env.MultiAgentEnv` (a subclass itself, or a
    function, e.g. one that wraps a PettingZoo env in
    :class:`~cairn.rl.env.pettingzoo_env.ParallelPettingZooEnv`) or a single-agent
    ``gymnasium.Env``. It may be a lambda or a closure: a config naming the env
    holds the creator (and Ray env runners get it with the config), and a
    checkpoint records the name and that a creator existed. A program restoring
    such a checkpoint in a new process registers the name again before the load,
    or passes ``env=creator`` to it.

    Raises:
        ValueError: A name with ``":"`` (that marks ``"module:Class"`` ids), or a
            creator that is not callable.
    """
    if not isinstance(name, str) or not name or ":" in name:
        raise ValueError(f"register_env needs a non-empty name without ':' (got {name!r}); ':' marks module paths.")
    if not callable(creator):
        raise ValueError(f"register_env({name!r}, ...) needs a callable env_config -> MultiAgentEnv or gymnasium.Env.")
    _ENVS[name] = creator


def registered_env(name: str) -> EnvCreator | None:
    """The creator :func:`register_env` gave ``name`` in this process, or None."""
    return _ENVS.get(name)


def env_creator_setting(creator: Callable[..., Any], role: str = ENV_ROLE) -> dict[str, Any]:
    """The config fields ``environment(creator)`` sets: ``env`` (the creator's label) and ``env_creator``."""
    kept = creator if isinstance(creator, Unrecorded) else unrecorded(creator, role)
    return {"env": kept.qualname, "env_creator": kept}


def creator_for(env: str, kept: Unrecorded | None, role: str = ENV_ROLE) -> Unrecorded | None:
    """The ``env_creator`` a config naming ``env`` holds, given the one it held (``kept``).

    A name registered in this process brings its creator (a record read from a
    checkpoint takes it: the program registered the name again before the
    load). A gymnasium id has none (a config whose ``env`` was replaced by one).
    Otherwise ``kept`` stays: the creator of ``environment(creator)``, one a Ray
    worker got with its config, or a record still waiting for ``env=``. ``role``
    is the record's role when ``kept`` gives none (``"evaluation_config/env"``).
    """
    registered = _ENVS.get(env)
    if registered is not None:
        if kept is not None and kept.fn is registered:
            return kept
        return unrecorded(registered, kept.role if kept is not None else role)
    if kept is not None and kept.fn is not None and env in gym.registry:
        return None
    return kept


def live_env_creator(config: Any) -> EnvCreator | None:
    """The creator that builds ``config``'s env, or None (built from its id or class).

    Raises:
        cairn.errors.MissingCallableError: The config was read from a checkpoint and
            the load was not given the creator.
    """
    kept = getattr(config, "env_creator", None)
    if kept is None:
        return None
    creator: EnvCreator = kept.live(ENV_ROLE)
    return creator

"""The checks a config runs on its settings when it is built, also when a checkpoint rebuilds it (SPEC 8).

Environment ids and ``env_config`` (what ``gymnasium.make`` would import or open), custom Ray
resources and placement, RLlib's learning-rate schedules; and the one wording of the refusal of a mapping function on a
``"multi:"`` env. A leaf of ``rl/config``: it imports nothing of ``cairn.rl``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from cairn.errors import CheckpointError
from cairn.registry import (
    loaded_module,
)

__all__ = [
    "BATCH_MODES",
    "COUNT_STEPS_BY",
    "MAX_LR_SCHEDULE_POINTS",
    "MULTI_AGENT_PREFIX",
    "PLACEMENT_STRATEGIES",
    "check_custom_resources",
    "check_env_config",
    "check_env_id",
    "check_lr_schedule",
    "multi_env_mapping_fn_refusal",
]


MULTI_AGENT_PREFIX = "multi:"
"""Prefix of an env id that asks for independent copies, one per agent."""


def check_env_id(env: Any) -> None:
    """Raise ``ValueError`` unless making ``env`` imports nothing that the id itself names.

    gymnasium reads ``"some.module:Env-v0"`` as "import ``some.module``, then
    make ``Env-v0``", so an id recorded in a checkpoint's config could make
    cairn import any installed module (``"this:CartPole-v1"``). An id with a
    module prefix is accepted only when that module is already imported (the
    one module resolver, :func:`cairn.registry.loaded_module`, decides). Configs
    check their id when they are built (also when a checkpoint rebuilds them)
    and when an algorithm starts; ``cairn evaluate`` checks the id it reads
    from a checkpoint.
    """
    if not isinstance(env, str) or not env:
        raise ValueError(f"env must be a gymnasium environment id (a non-empty str), got {env!r}.")
    env_id = env[len(MULTI_AGENT_PREFIX) :] if env.startswith(MULTI_AGENT_PREFIX) else env
    module, sep, name = env_id.partition(":")
    if not sep:
        return
    if not name or ":" in name:
        raise ValueError(f"env={env!r} is not a gymnasium id: expected 'Env-v0' or 'module:Env-v0'.")
    try:
        loaded_module(module, where=f"env={env!r}", what=f"gymnasium environment {name!r}")
    except CheckpointError as err:
        raise ValueError(
            f"{err} An environment id may name only a module the program has already imported, because "
            "gymnasium imports the module an id names."
        ) from err


# Render modes that draw into arrays or text. "human" (and anything unknown) makes gymnasium import a
# window toolkit (pygame, a MuJoCo viewer) and open a window: an import a recorded config would trigger.
_HEADLESS_RENDER_MODES = (None, "rgb_array", "rgb_array_list", "ansi", "ansi_list", "depth_array", "depth_array_list")


def check_env_config(env_config: Any) -> None:
    """Raise ``ValueError`` unless ``env_config`` is a dict whose ``render_mode`` is a headless one.

    ``env_config`` goes to ``gymnasium.make`` as keyword arguments, and may come
    from a checkpoint's recorded config: ``render_mode="human"`` there would
    make building the algorithm import pygame and open a window (SPEC 8: a
    checkpoint never triggers an import, not even indirectly). Checked with
    the env id, by the same callers as :func:`check_env_id`.
    """
    if not isinstance(env_config, Mapping):
        raise ValueError(f"env_config must be a dict of gymnasium.make keyword arguments, got {env_config!r:.80}.")
    mode = env_config.get("render_mode")
    if mode not in _HEADLESS_RENDER_MODES:
        raise ValueError(
            f"env_config render_mode={mode!r:.80} is refused: gymnasium imports a window toolkit for it, and a config "
            f"may come from a checkpoint. Use one of {[m for m in _HEADLESS_RENDER_MODES if m]} (or none), and make "
            "an environment to watch yourself (gymnasium.make(env_id, render_mode='human'))."
        )


PLACEMENT_STRATEGIES = ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD")
"""Ray's placement group strategies, as ``placement_strategy`` takes them."""

MAX_RESOURCE = 1e6
"""A bound on any one resource amount a config asks for (a recorded config is read before Ray sees it)."""

COUNT_STEPS_BY = ("env_steps", "agent_steps")
"""What ``count_steps_by`` may name (RLlib's two)."""

BATCH_MODES = ("truncate_episodes", "complete_episodes")
"""What ``batch_mode`` may name (RLlib's two; :mod:`cairn.rl.env.batch_modes`)."""

_MAX_CUSTOM_RESOURCES = 64
"""At most this many custom resources per actor."""


def check_custom_resources(resources: Any, *, where: str) -> None:
    """Raise ``ValueError`` unless ``resources`` is a dict of custom Ray resource name -> amount >= 0.

    ``CPU`` and ``GPU`` are refused (RLlib refuses them too): they have their own settings.
    """
    if not isinstance(resources, Mapping):
        raise ValueError(f"{where} must be a dict of Ray resource name -> amount, got {resources!r:.80}.")
    if len(resources) > _MAX_CUSTOM_RESOURCES:
        raise ValueError(f"{where} names {len(resources)} resources; at most {_MAX_CUSTOM_RESOURCES} are accepted.")
    for name, amount in resources.items():
        if not isinstance(name, str) or not name or len(name) > 200:
            raise ValueError(f"{where} has the resource name {name!r:.80}; give a non-empty str.")
        if name in ("CPU", "GPU", "memory", "object_store_memory"):
            raise ValueError(
                f"{where} names {name!r}, which Ray counts itself: use num_cpus_per_env_runner, "
                "num_cpus_per_learner or num_gpus_per_learner."
            )
        if isinstance(amount, bool) or not isinstance(amount, int | float) or not 0 <= amount < MAX_RESOURCE:
            raise ValueError(f"{where}[{name!r}] must be a number >= 0, got {amount!r:.40}.")


def multi_env_mapping_fn_refusal(env: str, what: str) -> str:
    """The message that refuses a policy mapping function on a ``"multi:"`` env (one home for its wording)."""
    return (
        f"{what} is refused on env={env!r}: its independent env copies give every agent a fixed module "
        "(config.policy_mapping, agent_0 -> ...), and a mapping function would never be called. Give the mapping "
        "as policy_mapping={'agent_0': ..., ...} when you build the config (a checkpoint restores into it), or use "
        "a MultiAgentEnv, whose episodes call the function (e.g. "
        "cairn.rl.examples.envs.classes.multi_agent.MultiAgentCartPole)."
    )


MAX_LR_SCHEDULE_POINTS = 1000
"""The most points an ``lr`` schedule may have (a recorded config is checked before a learner walks it)."""


def check_lr_schedule(points: Any, lr_anneal_timesteps: Any = None) -> None:
    """Raise ``ValueError`` unless ``points`` is RLlib's ``[[0, lr_0], [t_1, lr_1], ...]`` form of ``lr``.

    At most :data:`MAX_LR_SCHEDULE_POINTS` pairs of an int timestep and a finite learning rate
    >= 0, the first at timestep 0 with a positive rate, the timesteps increasing; and no
    ``lr_anneal_timesteps`` besides (the schedule says how the rate changes).
    """
    where = "training(lr=[[timestep, lr], ...])"
    if not isinstance(points, list | tuple) or not 1 <= len(points) <= MAX_LR_SCHEDULE_POINTS:
        raise ValueError(
            f"{where} takes 1 to {MAX_LR_SCHEDULE_POINTS} [timestep, lr] pairs, got {points!r:.80}; "
            "or give lr as a number."
        )
    last = -1
    for point in points:
        pair: tuple[Any, Any] = tuple(point) if isinstance(point, list | tuple) and len(point) == 2 else (None, None)
        t, lr = pair
        ok = isinstance(t, int) and not isinstance(t, bool) and t > last
        ok = ok and isinstance(lr, int | float) and not isinstance(lr, bool) and math.isfinite(lr) and lr >= 0
        if not ok:
            raise ValueError(
                f"{where}: {point!r:.40} is no [timestep, lr] pair after timestep {last} (timesteps are ints that "
                "increase from 0, learning rates finite numbers >= 0)."
            )
        last = t
    if points[0][0] != 0 or not points[0][1] > 0:
        raise ValueError(f"{where} must start at timestep 0 with a positive lr, got {points[0]!r:.40}.")
    if lr_anneal_timesteps is not None:
        raise ValueError(
            f"{where} and lr_anneal_timesteps={lr_anneal_timesteps!r:.20} both say how lr changes: "
            "give one (lr_anneal_timesteps=None with a schedule)."
        )

"""Importing Ray lazily, and turning actor failures into errors that name the actor."""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from types import ModuleType
from typing import Any

from cairn.errors import CheckpointError

__all__ = ["RAY_EXTRA_HINT", "ActorFailedError", "actor_label", "get_all", "import_ray", "init_ray", "ray_available"]

RAY_EXTRA_HINT = "pip install 'cairn-rl[ray]'"


class ActorFailedError(CheckpointError):
    """A Ray actor of a group died or failed while doing part of a checkpoint operation.

    Attributes:
        label: The actor, as the message names it (e.g. ``"env runner 1 (Ray actor 3f2a...)"``).
        died: Whether the actor process is gone (as opposed to a method raising).
    """

    def __init__(self, message: str, *, label: str, died: bool) -> None:
        super().__init__(message)
        self.label = label
        self.died = died


def ray_available() -> bool:
    """Whether Ray can be imported (without importing it)."""
    return importlib.util.find_spec("ray") is not None


def import_ray(what: str) -> ModuleType:
    """Import Ray for ``what`` (e.g. ``"num_env_runners=2"``), or say which extra to install.

    Raises:
        ValueError: Ray is not installed; the message names ``pip install 'cairn-rl[ray]'``.
    """
    try:
        import ray
    except ImportError as err:
        raise ValueError(
            f"{what} runs env runners or learners as Ray actors, but Ray is not installed. "
            f"Install the extra: {RAY_EXTRA_HINT}, or use num_env_runners=0 and num_learners<=1."
        ) from err
    return ray


def init_ray(what: str) -> ModuleType:
    """Import Ray and start (or join) a cluster if this process is not connected to one yet."""
    ray = import_ray(what)
    if not ray.is_initialized():
        ray.init(include_dashboard=False)
    return ray


def actor_label(kind: str, index: int, handle: Any) -> str:
    """``"<kind> <index> (Ray actor <id>)"``: how messages name an actor."""
    try:
        actor_id = handle._actor_id.hex()[:12]
    except AttributeError:  # pragma: no cover - Ray internals
        actor_id = "?"
    return f"{kind} {index} (Ray actor {actor_id})"


def unwrap(err: BaseException) -> BaseException:
    """The exception an actor method raised, without Ray's wrapper (traceback text)."""
    cause = getattr(err, "cause", None)
    return cause if isinstance(cause, BaseException) else err


def get_all(ray: ModuleType, calls: Sequence[tuple[str, Any]], *, doing: str) -> list[Any]:
    """``ray.get`` every ``(label, ref)``; wait for all even when some fail, then raise the first failure.

    Waiting for all first matters: a save must not be aborted (its staging folder
    deleted) while other actors are still writing into it.

    Raises:
        CheckpointError: A ``CheckpointError`` an actor raised is raised as it is
            (its type kept: ``CorruptCheckpointError`` stays one), with the actor named.
        ActorFailedError: An actor died, or raised another error.
    """
    results: list[Any] = []
    failure: BaseException | None = None
    for label, ref in calls:
        try:
            results.append(ray.get(ref))
        except ray.exceptions.RayActorError as err:
            results.append(None)
            if failure is None:
                failure = ActorFailedError(
                    f"{label} died while {doing}: {type(err).__name__}. The operation was abandoned; "
                    "nothing was committed or applied. The group replaces dead actors on its next use.",
                    label=label,
                    died=True,
                )
                failure.__cause__ = err
        except ray.exceptions.RayTaskError as err:
            results.append(None)
            if failure is None:
                cause = unwrap(err)
                if isinstance(cause, CheckpointError):
                    failure = type(cause)(f"{label}, while {doing}: {cause}")
                else:
                    failure = ActorFailedError(
                        f"{label} failed while {doing}: {type(cause).__name__}: {cause}",
                        label=label,
                        died=False,
                    )
                failure.__cause__ = cause
    if failure is not None:
        raise failure
    return results

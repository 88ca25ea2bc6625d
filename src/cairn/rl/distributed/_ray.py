"""Importing Ray lazily, and turning actor failures into errors that name the actor."""

from __future__ import annotations

import contextlib
import importlib.util
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

from cairn.errors import CheckpointError

__all__ = [
    "HEALTH_PROBE_TIMEOUT_S",
    "RAY_EXTRA_HINT",
    "ActorFailedError",
    "ActorTimeoutError",
    "EnvRunnersUnavailableError",
    "actor_label",
    "get_all",
    "import_ray",
    "init_ray",
    "ray_available",
    "stop_named",
]

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


class ActorTimeoutError(ActorFailedError, TimeoutError):
    """Ray actors of a group did not finish their part of a checkpoint operation within the deadline.

    The deadline is ``AlgorithmConfig.checkpoint_timeout_s``. The actors that
    missed it are stopped (a hung actor would otherwise write into a save already
    given up, or hold a restore's state forever) and replaced on the group's next use.

    Attributes:
        labels: Every actor that missed the deadline, as messages name them.
    """

    def __init__(self, message: str, *, label: str, labels: Sequence[str]) -> None:
        super().__init__(message, label=label, died=False)
        self.labels = list(labels)

    def __str__(self) -> str:
        # TimeoutError (an OSError) formats (errno, strerror) pairs; we always pass one message.
        return str(self.args[0]) if self.args else ""


class EnvRunnersUnavailableError(ActorFailedError, TimeoutError):
    """No remote env runner delivered a rollout within ``AlgorithmConfig.sample_timeout_s``.

    ``train()`` raises it with nothing trained (the algorithm's state is as before the
    call, but for the episode counts of late rollouts, which are kept). The runners that
    died are being replaced (``restart_failed_env_runners``); call ``train()`` again to go
    on, e.g. once a lost node is back. The message says how many runners are late,
    starting and gone, and what each one reserves.
    """

    def __init__(self, message: str) -> None:
        super().__init__(message, label="env runners", died=False)

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


HEALTH_PROBE_TIMEOUT_S = 30.0
"""How long a liveness ping may take before the actor counts as hung (at most: a shorter
``checkpoint_timeout_s`` wins). RLlib's ``env_runner_health_probe_timeout_s`` is 30 s too."""


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


def stop_named(ray: ModuleType, actors: Sequence[Any], label: Callable[[int], str], labels: Sequence[str]) -> None:
    """Kill the actors of a group whose ``label(position)`` is one of ``labels`` (those that missed a deadline).

    The group replaces killed actors as it replaces dead ones, on its next use.
    """
    for position, actor in enumerate(actors):
        if label(position) in labels:
            with contextlib.suppress(Exception):  # already gone
                ray.kill(actor)


def unwrap(err: BaseException) -> BaseException:
    """The exception an actor method raised, without Ray's wrapper (traceback text)."""
    cause = getattr(err, "cause", None)
    return cause if isinstance(cause, BaseException) else err


def get_all(
    ray: ModuleType,
    calls: Sequence[tuple[str, Any]],
    *,
    doing: str,
    timeout_s: float | None = None,
    stop: Callable[[Sequence[str]], None] | None = None,
    setting: str = "checkpoint_timeout_s",
    hint: str = "",
) -> list[Any]:
    """``ray.get`` every ``(label, ref)``; wait for all even when some fail, then raise the first failure.

    Waiting for all first matters: a save must not be aborted (its staging folder
    deleted) while other actors are still writing into it. For the same reason,
    actors that miss the deadline are stopped (``stop``) before the error is raised:
    a hung actor that woke up later would write into a save already given up.

    Args:
        ray: The ``ray`` module.
        calls: ``(label, object ref)`` of each call, ``label`` naming its actor.
        doing: What the actors were doing, for messages (``"writing its part of a checkpoint"``).
        timeout_s: The deadline for all the calls together (``AlgorithmConfig.checkpoint_timeout_s``
            on checkpoint paths); None waits as long as they take.
        stop: Called with the labels of the actors that missed the deadline, to stop them.
        setting: The ``AlgorithmConfig`` field ``timeout_s`` comes from, for messages.
        hint: A sentence added to a timeout's message (what the actors reserve, when they may
            be waiting for a node).

    Raises:
        ActorTimeoutError: Some calls were not done within ``timeout_s``.
        CheckpointError: A ``CheckpointError`` an actor raised is raised as it is
            (its type kept: ``CorruptCheckpointError`` stays one), with the actor named.
        ActorFailedError: An actor died, or raised another error.
    """
    if timeout_s is not None and calls:
        refs = [ref for _, ref in calls]
        _, late = ray.wait(refs, num_returns=len(refs), timeout=timeout_s)
        if late:
            _raise_timeout(calls, late, doing=doing, timeout_s=timeout_s, stop=stop, setting=setting, hint=hint)
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


def _raise_timeout(
    calls: Sequence[tuple[str, Any]],
    late: Sequence[Any],
    *,
    doing: str,
    timeout_s: float,
    stop: Callable[[Sequence[str]], None] | None,
    setting: str,
    hint: str = "",
) -> None:
    late_refs = set(late)
    labels = [label for label, ref in calls if ref in late_refs]
    if stop is not None:
        stop(labels)
    what_next = (
        "It was stopped; the group replaces it on its next use (fresh environments or, for a learner, "
        "the state of a healthy one)"
        if stop is not None
        else "It may still be running"
    )
    raise ActorTimeoutError(
        f"{labels[0]}{f' and {len(labels) - 1} more' if len(labels) > 1 else ''} did not finish {doing} "
        f"within {setting}={timeout_s:g} s. {what_next}. The operation was abandoned: a save commits "
        "nothing; a restore that stopped while applying leaves the algorithm partly restored (restore again). "
        "If the actor is only slow (a large state, a slow storage, a slow start), raise "
        f"AlgorithmConfig.{setting}; if it hangs, look at its environment or callbacks.{' ' + hint if hint else ''}",
        label=labels[0],
        labels=labels,
    )

"""The remote side of checkpoints: Ray actors write and read their folders through the engine's hook.

The groups with actors are delegates (:class:`cairn.delegation.DelegatedComponent`)
of the folders their actors hold: the
:class:`~cairn.rl.core.learner.learner_group.LearnerGroup` delegates ``learner`` to its
:class:`~cairn.rl.distributed.learners.RemoteLearners`, the
:class:`~cairn.rl.algorithms.algorithm.Algorithm` delegates ``env_runner`` to the
:class:`~cairn.rl.distributed.env_runners.RemoteEnvRunners`. The engine does
the rest (staging, manifests, commit, verification, apply only when every read
passed); each actor writes its folder with :func:`cairn.delegation.write_folder`
straight to the storage (no large state passes through the driver), and reads
and verifies it with :func:`cairn.delegation.read_folder`, in parallel with the
others, keeping it until the engine says to apply or drop it.

The layout on disk is exactly that of a local checkpoint: a checkpoint from a
Ray run restores without Ray, and the reverse.

Storage must be reachable from the actors: a local path (the actors run on
this machine, or the path is on a shared filesystem) or an object store. For a
``memory://`` filesystem (private to each process) a group writes and reads
the folder in the driver instead (:func:`storage_is_shared`), with the state it
gathers from, and hands back to, its actors.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cairn.storage.base import Storage

__all__ = ["nest_state", "storage_is_shared"]


def storage_is_shared(storage: Storage) -> bool:
    """Whether other processes see what this one writes to ``storage`` (not so for ``memory://``)."""
    fs = getattr(storage, "fs", None)
    protocol = getattr(fs, "protocol", ())
    protocols = (protocol,) if isinstance(protocol, str) else tuple(protocol)
    return "memory" not in protocols


def nest_state(component: str | None, state: dict[str, Any]) -> dict[str, Any]:
    """``state`` of the subcomponent at ``component`` (``/``-joined) as a state of the whole component.

    ``nest_state("rl_module/p0", s) == {"rl_module": {"p0": s}}``; a ``set_state``
    leaves the keys it lacks as they are.
    """
    if not component:
        return state
    for name in reversed(component.strip("/").split("/")):
        state = {name: state}
    return state

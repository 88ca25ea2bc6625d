"""Delegated folders: a component of a checkpoint that someone else writes and reads.

A component whose real state lives elsewhere (a Ray actor, a subprocess, a
thread with its own copy) is *delegated*: its owner lists it in
:meth:`~cairn.Checkpointable.get_delegated_components` with a
:class:`DelegatedComponent`, and the engine lets that delegate write and read
the component's folder while it does the rest of the checkpoint. Every entry
point handles it the same way: ``save_to_path``, ``restore_from_path`` (also with
``component=``), ``from_checkpoint`` and ``CheckpointManager`` saves (sync,
async, incremental) and restores.

Save
    The engine asks the owner for its state without the delegated components
    (``get_state(not_components=[...])``), plans the rest, claims the staging
    place (``begin_write``) and calls :meth:`DelegatedComponent.start_save` with
    the delegated folder's place inside it, then writes its own folders. Each
    parent's ``manifest.json`` records the :class:`~cairn.manifest.FileEntry` the
    delegate returned for the folder's manifest (this seals the folder, as for any
    component), its ``metadata.json`` lists the component, and the root manifest
    is written last. If a delegate fails, every other delegate is waited for, the
    staging place is removed and the error is raised: nothing is committed, and
    a previous checkpoint at the path is intact. ``start_save`` must take what it
    writes before it returns (an async manager save returns right after it, and
    training goes on).

Restore
    The engine verifies the manifests down to each delegated folder, calls
    :meth:`DelegatedComponent.start_load` with the folder and the manifest entry
    it must match, and reads its own part meanwhile, into fresh arrays (no live
    buffers: nothing may change before every part passed). When every read
    passed it calls ``finish_load(apply=True)`` on each delegate, then applies
    its own part bottom-up; if any read failed, ``finish_load(apply=False)``:
    a corrupt file anywhere leaves every process as it was (SPEC 8).

The folder a delegate writes is an ordinary component folder
(:func:`write_folder` writes one), so a checkpoint restores with or without
delegates, at any scale. The delegate side uses :func:`write_folder` and
:func:`read_folder`, which run anywhere the storage is reachable.

Example, a delegate that writes from a thread::

    class ThreadDelegate:
        restores_local_copy = False

        def __init__(self, worker: cairn.Checkpointable) -> None:
            self.worker, self.pool = worker, ThreadPoolExecutor(1)
            self.pending: LoadedComponent | None = None

        def start_save(self, folder, *, allow_pickle):
            state = snapshot(self.worker.get_state())   # taken now: training goes on
            job = self.pool.submit(write_folder, self.worker, folder, state=state)
            return job.result                           # the waiter returns the FileEntry

        def start_load(self, folder, *, component, allow_pickle):
            def read() -> None:
                self.pending = read_folder(self.worker, folder, component=component)
            return self.pool.submit(read).result

        def finish_load(self, *, apply):
            pending, self.pending = self.pending, None
            if apply and pending is not None:
                pending.apply()

    class Owner(cairn.Checkpointable):
        def get_checkpointable_components(self):
            return [("worker", self.worker)]
        def get_delegated_components(self):
            return {"worker": self.delegate}
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from cairn.errors import CheckpointError
from cairn.manifest import FileEntry

if TYPE_CHECKING:
    from cairn._restore import LoadedFolder
    from cairn.checkpointable import Checkpointable
    from cairn.storage.base import Storage

__all__ = [
    "DelegatedComponent",
    "DelegatedFolder",
    "LoadedComponent",
    "Waiter",
    "read_folder",
    "write_folder",
]

Waiter = Callable[[], Any]
"""Blocks until a delegate's work is done; returns its result or raises its error.

The engine calls it exactly once. It must give up (raise a ``CheckpointError``
naming what it waited for) rather than block forever.
"""


@dataclass(frozen=True)
class DelegatedFolder:
    """Where a delegated component's folder is, for the delegate (picklable: it may travel).

    Attributes:
        storage: The checkpoint's storage.
        path: The folder, on ``storage``. On save, inside the staging place.
        root: The staging place (save) or the folder the restore was opened at;
            on storage with local paths, a delegate that cannot see it is on
            another filesystem and refuses with a clear error.
        component: The folder's component path in the checkpoint (for messages).
        expected: On restore, the entry of the folder's ``manifest.json`` that the
            parent's manifest records (None when ``path`` is the restore's own
            folder and no parent seals it); the delegate's read checks it.
    """

    storage: Storage
    path: str
    root: str
    component: str
    expected: FileEntry | None = None

    def uri(self) -> str:
        """The folder as a user names it (with the protocol on remote storage)."""
        return self.storage.uri(self.path)


class DelegatedComponent(Protocol):
    """Someone else who writes and reads one component folder of a checkpoint.

    Offered by the component's owner through
    :meth:`~cairn.Checkpointable.get_delegated_components`. See the module docs
    for the order of calls.
    """

    @property
    def restores_local_copy(self) -> bool:
        """Whether the engine also restores the owner's own component object from the folder.

        True when that object holds something of its own (group totals, say); False
        when it is only the shape of what the delegate holds (class, constructor,
        components), which the engine then neither reads nor applies.
        """

    def start_save(self, folder: DelegatedFolder, *, allow_pickle: bool) -> Waiter:
        """Start writing the component's checkpoint folder at ``folder.path``.

        Take the state before returning. The waiter returns the
        :class:`~cairn.manifest.FileEntry` of the folder's ``manifest.json``
        (what :func:`write_folder` returns).
        """

    def start_load(self, folder: DelegatedFolder, *, component: str | None, allow_pickle: bool) -> Waiter:
        """Start reading and verifying ``folder``, applying nothing yet (:func:`read_folder`).

        With ``component`` (a ``/``-joined path below the delegated component),
        ``folder`` is the folder of that subcomponent and only it is restored.
        """

    def finish_load(self, *, apply: bool) -> None:
        """Apply what :meth:`start_load` read, or with ``apply=False`` drop it."""


def _check_reachable(folder: DelegatedFolder) -> None:
    """Refuse a local path that this process does not see (another node's disk)."""
    if folder.storage.local_paths and not os.path.isdir(folder.root):
        raise CheckpointError(
            f"The checkpoint folder {folder.storage.uri(folder.root)} does not exist in the process handling "
            f"the component {folder.component!r}: it runs on a machine that does not share that filesystem. "
            "Save to a filesystem every node shares, or to an object store such as s3://."
        )


def write_folder(
    obj: Checkpointable, folder: DelegatedFolder, *, allow_pickle: bool = False, state: dict[str, Any] | None = None
) -> FileEntry:
    """Write ``obj``'s checkpoint folder (and its components' folders) at ``folder.path``.

    The delegate side of a save. Everything below ``obj`` is written here,
    whatever ``obj``'s own delegations.

    Args:
        obj: The component whose folder this is.
        folder: What :meth:`DelegatedComponent.start_save` was given.
        allow_pickle: As for ``save_to_path``.
        state: The state to write; None calls ``obj.get_state()``.

    Returns:
        The entry of the folder's ``manifest.json``, for the parent's manifest.

    Raises:
        CheckpointError: An unsavable value (named), storage failure, or a
            storage this process does not reach.
    """
    from cairn._save import plan_save, write_planned

    _check_reachable(folder)
    plan = plan_save(
        obj, obj.get_state() if state is None else state, allow_pickle=allow_pickle, where=folder.component
    )
    return write_planned(folder.storage, folder.path, plan)


class LoadedComponent:
    """A component folder read and verified by :func:`read_folder`, not applied yet."""

    def __init__(self, target: Checkpointable, loaded: LoadedFolder, label: str) -> None:
        """Wrap what the engine read for ``target`` (component path ``label``)."""
        self.target = target
        self._loaded = loaded
        self._label = label

    def own_state(self) -> dict[str, Any]:
        """The folder's own state (without its components), upgraded to the class's version."""
        return self._loaded.state

    def state(self) -> dict[str, Any]:
        """The whole state read, each component's state under its name (as ``get_state`` gives it)."""

        def nested(loaded: LoadedFolder) -> dict[str, Any]:
            return {**loaded.state, **{name: nested(child) for name, child in loaded.children.items()}}

        return nested(self._loaded)

    def apply(self, *, own_state: dict[str, Any] | None = None) -> None:
        """Apply it: components bottom-up, then the target's own state.

        Args:
            own_state: Apply this as the target's own state instead of the one read
                (a worker taking only its share of a group's folder).
        """
        from cairn._restore import LoadedFolder, apply_loaded

        loaded = self._loaded
        if own_state is not None:
            loaded = LoadedFolder(own_state, loaded.children, loaded.version, loaded.where)
        apply_loaded(self.target, loaded, self._label)


def read_folder(
    obj: Checkpointable, folder: DelegatedFolder, *, component: str | None = None, allow_pickle: bool = False
) -> LoadedComponent:
    """Read and verify ``folder`` for ``obj`` (or its subcomponent ``component``), applying nothing.

    The delegate side of a restore. Tensors are read into fresh arrays, never into
    the buffers ``obj`` offers (``get_state_buffers``): the result is applied only
    once every part of the restore has been read.

    Raises:
        The errors of ``Checkpointable.restore_from_path``.
    """
    from cairn._reader import FolderReader
    from cairn._restore import load_folder
    from cairn._tree import find_component

    _check_reachable(folder)
    target = obj if not component else find_component(obj, component)
    label = f"{folder.component}/{component.strip('/')}" if component else folder.component
    reader = FolderReader(folder.storage, folder.path, expected=folder.expected)
    loaded = load_folder(target, reader, allow_pickle=allow_pickle, label=label, in_place=False)
    return LoadedComponent(target, loaded, label)

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

This module sits above the engine: the protocol the engine calls
(:class:`DelegatedComponent`, :class:`DelegatedFolder`, ``Waiter``) lives in
``cairn._delegate_protocol``, below it, and is re-exported here.

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
import platform
from dataclasses import dataclass
from typing import Any

import numpy as np

from cairn._delegate_protocol import DelegatedComponent, DelegatedFolder, Waiter
from cairn._reader import FolderReader
from cairn._restore import LoadedFolder, apply_loaded, load_folder
from cairn._save import check_written, plan_save, write_planned
from cairn._tree import ComponentNode
from cairn.checkpointable import Checkpointable
from cairn.errors import CheckpointError, CorruptCheckpointError
from cairn.manifest import MANIFEST, MAX_JSON_BYTES, FileEntry, Hasher, Manifest

__all__ = [
    "DelegatedComponent",
    "DelegatedFolder",
    "LoadedComponent",
    "SharedRead",
    "Waiter",
    "adopt_read",
    "read_folder",
    "write_folder",
]


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
    _check_reachable(folder)
    plan = plan_save(
        obj, obj.get_state() if state is None else state, allow_pickle=allow_pickle, where=folder.component
    )
    written: list[Any] = []
    entry = write_planned(folder.storage, folder.path, plan, digest=folder.digest, written=written)
    check_written(folder.storage, written)  # as the owner's save does for its own files, before its commit
    return entry


class LoadedComponent:
    """A component folder read and verified by :func:`read_folder`, not applied yet.

    Attributes:
        target: The object the folder is applied to.
    """

    def __init__(
        self, node: ComponentNode, loaded: LoadedFolder, *, names: tuple[str, str | None] = ("", None)
    ) -> None:
        """Wrap what the engine read for the object of ``node`` (whose path names it in messages).

        ``names``: the delegated folder's component and the subcomponent read (``read_folder``'s),
        for :meth:`shared`.
        """
        self.target = node.obj
        self._node = node
        self._loaded = loaded
        self._names = names

    def shared(self) -> SharedRead:
        """What was read, without the object it was read for: for :func:`adopt_read` in another process."""
        return SharedRead(self._names[0], self._names[1], self._loaded)

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
        loaded = self._loaded
        if own_state is not None:
            loaded = LoadedFolder(own_state, loaded.children, loaded.version, loaded.where)
        apply_loaded(self._node, loaded)


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
    _check_reachable(folder)
    # One tree for the read and the later apply, named from the delegated folder's path.
    tree = ComponentNode(obj, folder.component)
    target = tree.find(component) if component else tree
    reader = FolderReader(folder.storage, folder.path, expected=folder.expected)
    try:
        loaded = load_folder(target, reader, allow_pickle=allow_pickle, in_place=False)
    except CorruptCheckpointError as err:
        other = _another_version(folder)
        if other is not None:
            raise CorruptCheckpointError(other) from err
        raise
    return LoadedComponent(target, loaded, names=(folder.component, component))


@dataclass(frozen=True)
class SharedRead:
    """A folder read and verified by :func:`read_folder`, picklable: another copy of the component takes it.

    Delegates whose workers all hold the same state (data-parallel learners) read a folder
    once per machine and hand this to the others there (:func:`adopt_read`), instead of
    each downloading and verifying the same files.
    """

    component: str
    """The delegated folder's component (names the tree in messages)."""
    subcomponent: str | None
    """The subcomponent read (``read_folder``'s ``component``), None for the whole folder."""
    loaded: LoadedFolder


def adopt_read(obj: Checkpointable, shared: SharedRead) -> LoadedComponent:
    """What another process read (:meth:`LoadedComponent.shared`), to be applied to ``obj``, a copy of its component.

    Arrays that came through shared memory read-only (Ray's object store) are copied, so
    ``obj`` owns writable state once it is applied, as after its own read.
    """
    tree = ComponentNode(obj, shared.component)
    target = tree.find(shared.subcomponent) if shared.subcomponent else tree
    return LoadedComponent(target, _writable(shared.loaded), names=(shared.component, shared.subcomponent))


def _writable(loaded: LoadedFolder) -> LoadedFolder:
    def own(value: Any) -> Any:
        if type(value) is dict:
            return {k: own(v) for k, v in value.items()}
        if type(value) in (list, tuple):
            return type(value)(own(v) for v in value)
        if isinstance(value, np.ndarray) and not value.flags.writeable:
            return value.copy()
        return value

    children = {name: _writable(child) for name, child in loaded.children.items()}
    return LoadedFolder(own(loaded.state), children, loaded.version, loaded.where)


def _another_version(folder: DelegatedFolder) -> str | None:
    """Why ``folder`` failed its check, when it holds a whole manifest, just not the one the checkpoint records.

    Then the folder this process reads is another version of the component (issue 41): most
    often a stale copy on this node's own disk at the same path (storage not shared between the
    nodes), or the checkpoint was saved over meanwhile. None when the manifest matches, is
    missing or unreadable, or is not a manifest (damage: the caller's error stands).
    """
    if folder.expected is None:
        return None
    try:
        data = folder.storage.read_file(folder.storage.join(folder.path, MANIFEST), max_bytes=MAX_JSON_BYTES)
        hasher = Hasher(folder.expected.digest.algorithm)
        hasher.update(data)
        if hasher.digest() == folder.expected.digest:
            return None
        Manifest.from_bytes(data, where=folder.storage.uri(folder.path))
    except (OSError, CheckpointError):
        return None
    return (
        f"{folder.uri()} holds another version of the component {folder.component!r} than the checkpoint being "
        f"restored: its {MANIFEST} is a whole manifest, but not the one the checkpoint records. The process "
        f"reading it (pid {os.getpid()} on {platform.node()}) sees another copy of that path: a stale copy on its "
        "node's own disk, or a checkpoint saved over it meanwhile. Save and restore through storage every node "
        "shares (a shared filesystem or s3://), or remove the stale copy from that node."
    )

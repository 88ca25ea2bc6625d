"""Checkpoints whose parts live in Ray actors: each actor writes and reads its own folder.

A component with parts in other processes says so with a method
``remote_checkpoint_parts() -> {relative component path: RemotePart}`` (the
:class:`~cairn.rl.core.learner.learner_group.LearnerGroup` returns ``{"learner": ...}`` when
its learners are remote; the :class:`~cairn.rl.algorithms.algorithm.Algorithm` adds
``{"env_runner": ...}`` when its env runners are). :func:`save` and
:func:`restore` follow the engine's rules (``cairn._engine``) with those
folders done by the actors:

Save
    The driver gets and plans the state of everything but the remote parts,
    opens the storage's staging place (``begin_write``: a hidden sibling folder
    on a local disk, the final place on an object store), starts every remote
    part's write into its folder of the staging place (the actors encode and
    write their own state; no large state passes through the driver), writes
    its own folders meanwhile, then writes each parent's ``manifest.json`` with
    the :class:`~cairn.manifest.FileEntry` (size, CRC-32) each actor returned,
    the root manifest last, and commits. If an actor fails or dies, every
    other write is waited for, the staging place is removed and the error
    (naming the actor) is raised: nothing is committed.

Restore
    The driver verifies the manifests down to each remote part's folder and
    hands each part a reader of its folder with the manifest entry it must
    match. Every actor reads and verifies its folder in parallel while the
    driver reads its own parts; only when every read succeeded is anything
    applied (actors first, then the driver's components bottom-up, whose
    ``set_state`` resynchronizes the env runners). A corrupt file anywhere
    leaves every process as it was.

The layout on disk is exactly that of a local checkpoint: a checkpoint from a
Ray run restores without Ray, and the reverse.

Storage must be reachable from the actors: a local path (the actors run on
this machine, or the path is on a shared filesystem) or an object store. For
a ``memory://`` filesystem (private to each process) the driver gathers the
state and writes it itself.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import uuid
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from cairn import _engine
from cairn.errors import CheckpointError, ComponentNotFoundError
from cairn.manifest import CTOR, MANIFEST, MAX_JSON_BYTES, METADATA, FileEntry, Manifest
from cairn.storage.base import Storage, resolve_storage

if TYPE_CHECKING:
    from cairn.checkpointable import Checkpointable

__all__ = [
    "RemotePart",
    "load_component",
    "remote_parts",
    "restore",
    "save",
    "storage_is_shared",
    "write_component",
]


class RemotePart(Protocol):
    """The remote side of one component folder of a checkpoint (one or more actors)."""

    @property
    def restore_locally(self) -> bool:
        """Whether the driver's own object at this path is restored too (it holds group totals)."""

    def start_save(self, storage: Storage, folder: str, *, staging_root: str, allow_pickle: bool) -> Waiter:
        """Start writing the component into ``folder``; the waiter returns its manifest's entry."""

    def start_load(self, reader: _engine.FolderReader, *, component: str | None, allow_pickle: bool) -> Waiter:
        """Start reading and verifying ``reader``'s folder in the actors (nothing applied yet).

        With ``component``, ``reader`` is the folder of that subcomponent of the part.
        """

    def finish_load(self, *, apply: bool) -> None:
        """Apply (or, with ``apply=False``, drop) what :meth:`start_load` read."""


Waiter = Callable[[], Any]
"""Blocks until a remote operation is done; returns its result or raises its error."""


class Once:
    """A waiter that runs its function once and then returns (or raises) the same outcome."""

    def __init__(self, fn: Callable[[], Any]) -> None:
        self._fn: Callable[[], Any] | None = fn
        self._result: Any = None
        self._error: BaseException | None = None

    def __call__(self) -> Any:
        if self._fn is not None:
            fn, self._fn = self._fn, None
            try:
                self._result = fn()
            except BaseException as err:
                self._error = err
        if self._error is not None:
            raise self._error
        return self._result


# --------------------------------------------------------------------------- finding parts


def remote_parts(obj: Checkpointable, prefix: str = "") -> dict[str, RemotePart]:
    """Component path -> remote part, for every component of ``obj`` (``obj`` included) that has some."""
    out: dict[str, RemotePart] = {}
    hook = getattr(obj, "remote_checkpoint_parts", None)
    if hook is not None:
        for rel, part in hook().items():
            out[f"{prefix}/{rel}" if prefix else rel] = part
    for name, comp in _engine.checkpointable_components(obj, where=prefix or "<root>").items():
        path = f"{prefix}/{name}" if prefix else name
        if path in out:
            continue
        out.update(remote_parts(comp, path))
    return out


def storage_is_shared(storage: Storage) -> bool:
    """Whether other processes see what this one writes to ``storage`` (not so for ``memory://``)."""
    fs = getattr(storage, "fs", None)
    protocol = getattr(fs, "protocol", ())
    protocols = (protocol,) if isinstance(protocol, str) else tuple(protocol)
    return "memory" not in protocols


# --------------------------------------------------------------------------- save


def _patched_metadata(chunks: list[Any], extra_components: list[str]) -> bytes:
    """``metadata.json`` with the remote components added to its ``components`` list."""
    meta = json.loads(b"".join(bytes(c) for c in chunks))
    meta["components"] = sorted({*meta.get("components", []), *extra_components})
    return _engine._json_bytes(meta)


def _write_tree(
    storage: Storage,
    folder: str,
    plan: _engine._PlannedFolder,
    obj: Checkpointable,
    prefix: str,
    waiters: Mapping[str, Waiter],
) -> FileEntry:
    """``_engine.write_planned`` where the folders of remote parts come from their waiters."""
    storage.makedirs(folder)
    manifest = Manifest()
    remote_here: list[str] = []
    for name, comp in _engine.checkpointable_components(obj, where=prefix or "<root>").items():
        path = f"{prefix}/{name}" if prefix else name
        if path in waiters:
            remote_here.append(name)
            manifest.components.append(name)
        elif name in plan.children:
            manifest.files[f"{name}/{MANIFEST}"] = _write_tree(
                storage, storage.join(folder, name), plan.children[name], comp, path, waiters
            )
            manifest.components.append(name)
    files = dict(plan.files)
    if remote_here:
        files[METADATA] = [_patched_metadata(files[METADATA], remote_here)]
    for fname, chunks in files.items():
        size, crc = storage.write_file(storage.join(folder, fname), chunks)
        manifest.files[fname] = FileEntry(size, crc)
    for name in remote_here:  # the actors wrote meanwhile; their entries seal their folders
        entry = waiters[f"{prefix}/{name}" if prefix else name]()
        if not isinstance(entry, FileEntry):
            raise CheckpointError(f"The remote part {name!r} returned {entry!r} instead of its manifest entry.")
        manifest.files[f"{name}/{MANIFEST}"] = entry
    size, crc = storage.write_file(storage.join(folder, MANIFEST), [manifest.to_bytes()])
    return FileEntry(size, crc)


def save(
    obj: Checkpointable, path: str | os.PathLike[str] | None, *, filesystem: Any = None, allow_pickle: bool = False
) -> str:
    """Save ``obj`` at ``path`` with each remote part written by its actors; return the path.

    Raises:
        CheckpointError: An unsavable value, a storage failure, or an actor that
            failed or died (named); nothing is committed and a previous checkpoint
            at ``path`` is intact.
    """
    if path is None:
        path = os.path.join(tempfile.gettempdir(), f"cairn-{uuid.uuid4().hex[:16]}")
    storage, final = resolve_storage(path, filesystem)
    parts = remote_parts(obj)
    if not parts or not storage_is_shared(storage):
        # Nothing remote, or storage the actors cannot reach: the driver gathers the
        # state (get_state of a remote group fetches it) and writes everything.
        plan = _engine.plan_save(obj, obj.get_state(), allow_pickle=allow_pickle)
        return _engine.commit_plan(storage, final, plan)
    state = obj.get_state(not_components=sorted(parts))
    plan = _engine.plan_save(obj, state, allow_pickle=allow_pickle)
    staging = storage.begin_write(final)
    waiters: dict[str, Waiter] = {}
    try:
        for part_path, part in parts.items():
            waiters[part_path] = Once(
                part.start_save(
                    storage,
                    storage.join(staging, *part_path.split("/")),
                    staging_root=staging,
                    allow_pickle=allow_pickle,
                )
            )
        _write_tree(storage, staging, plan, obj, "", waiters)
        for waiter in waiters.values():  # a part whose parent was not saved must not write on
            waiter()
        storage.commit(staging, final)
    except BaseException:
        for waiter in waiters.values():  # let every actor finish before the staging place goes
            with contextlib.suppress(BaseException):
                waiter()
        storage.abort(staging, final)
        raise
    return storage.uri(final)


def write_component(
    obj: Checkpointable,
    storage: Storage,
    folder: str,
    *,
    staging_root: str,
    allow_pickle: bool,
    where: str,
    state_overrides: Mapping[str, Any] | None = None,
) -> FileEntry:
    """In an actor: write ``obj``'s checkpoint folder (and its components') at ``folder``.

    Args:
        obj: The component the actor holds.
        storage: The checkpoint's storage (pickled by the driver).
        folder: Where the folder goes, inside the driver's staging place.
        staging_root: The staging place; on a local disk it must already exist
            here, else this process does not share the driver's filesystem.
        allow_pickle: As for ``save_to_path``.
        where: The component path, for error messages.
        state_overrides: Top-level keys replacing those of ``obj.get_state()``
            (group totals that the driver keeps).

    Returns:
        The entry of the folder's ``manifest.json`` for the parent's manifest.
    """
    if storage.local_paths and not os.path.isdir(staging_root):
        raise CheckpointError(
            f"The checkpoint's staging folder {staging_root} does not exist on the node of the actor "
            f"holding {where!r}: the checkpoint path must be on a filesystem every Ray node shares "
            "(or an object store such as s3://)."
        )
    state = obj.get_state()
    if state_overrides:
        state.update(state_overrides)
    plan = _engine.plan_save(obj, state, allow_pickle=allow_pickle, where=where)
    return _engine.write_planned(storage, folder, plan)


# --------------------------------------------------------------------------- restore


def _no_state_buffers() -> None:
    return None


@contextlib.contextmanager
def fresh_arrays(obj: Checkpointable) -> Iterator[None]:
    """Within the block, a restore of ``obj``'s tree reads into new arrays, not live buffers.

    The engine reads tensors straight into the buffers a component offers
    (``get_state_buffers``) once its own files are verified. A restore made of
    several parts must not touch any object before *every* part is verified, so
    the parts read into fresh arrays and apply them only at the end.
    """
    patched: list[Any] = []

    def walk(node: Checkpointable) -> None:
        if "get_state_buffers" not in vars(node):
            setattr(node, "get_state_buffers", _no_state_buffers)  # noqa: B010 - shadows the method
            patched.append(node)
        for _, comp in node.get_checkpointable_components():
            walk(comp)

    try:
        walk(obj)
        yield
    finally:
        for node in patched:
            delattr(node, "get_state_buffers")


def load_component(
    obj: Checkpointable,
    reader: _engine.FolderReader,
    *,
    component: str | None,
    allow_pickle: bool,
    where: str,
) -> tuple[Checkpointable, _engine.LoadedFolder, str]:
    """In an actor: read and verify ``reader``'s folder for ``obj`` (or its ``component``).

    Returns:
        ``(target, loaded, label)`` to pass to ``cairn._engine.apply_loaded`` once every
        part of the restore has been read.
    """
    target = obj if not component else _engine.find_component(obj, component)
    label = f"{where}/{component.strip('/')}" if component else where
    with fresh_arrays(target):  # applied only once every part of the restore is read
        loaded = _engine.load_folder(target, reader, allow_pickle=allow_pickle, label=label)
    return target, loaded, label


def _load_local(
    target: Checkpointable, reader: _engine.FolderReader, *, allow_pickle: bool, label: str, skip: set[str]
) -> _engine.LoadedFolder:
    """``_engine.load_folder`` that leaves out the folders at the paths ``skip`` (relative)."""
    if not skip:
        return _engine.load_folder(target, reader, allow_pickle=allow_pickle, label=label)
    _engine._check_class(target, reader)
    reader.check_pickle(allow_pickle)
    reader.read(CTOR, max_bytes=MAX_JSON_BYTES)
    state = _engine.upgrade(
        type(target),
        reader.state(allow_pickle),
        reader.metadata["state_version"],
        f"{reader.where()} (component {label or '<root>'})",
    )
    comps = _engine.checkpointable_components(target, where=label or "<root>")
    children: dict[str, _engine.LoadedFolder] = {}
    for name in reader.manifest.components:
        if name not in comps or name in skip:
            continue
        sub_skip = {s[len(name) + 1 :] for s in skip if s.startswith(name + "/")}
        children[name] = _load_local(
            comps[name],
            reader.child(name),
            allow_pickle=allow_pickle,
            label=f"{label}/{name}" if label else name,
            skip=sub_skip,
        )
    return _engine.LoadedFolder(state, children)


def _nested_state(loaded: _engine.LoadedFolder) -> dict[str, Any]:
    """A loaded tree as one state dict (each component's state under its name)."""
    return {**loaded.state, **{name: _nested_state(child) for name, child in loaded.children.items()}}


def _descend(reader: _engine.FolderReader, rel: str) -> _engine.FolderReader | None:
    """The reader of the folder at ``rel`` below ``reader``; None when the checkpoint lacks it."""
    current = reader
    for name in rel.split("/"):
        try:
            current = current.child(name)
        except ComponentNotFoundError:
            return None  # a component whose folder is missing is left as it is
    # A fresh reader: the actor reads the manifest itself and checks it against `expected`.
    return _engine.FolderReader(current.storage, current.folder, expected=current.expected)


def restore(
    obj: Checkpointable,
    path: str | os.PathLike[str],
    *,
    component: str | None = None,
    filesystem: Any = None,
    allow_pickle: bool = False,
) -> None:
    """Restore ``obj`` (or its ``component``) from ``path``, each remote part read by its actors.

    Raises:
        The errors of ``Checkpointable.restore_from_path``; an actor's error names the
        actor. Nothing is applied anywhere unless every part was read and verified.
    """
    label = component.strip("/") if component else ""
    target = obj if not label else _engine.find_component(obj, label)
    parts = remote_parts(obj)
    reader = _engine.open_checkpoint(path, filesystem)
    if not parts:
        loaded = _engine.load_folder(target, reader, allow_pickle=allow_pickle, label=label)
        _engine.apply_loaded(target, loaded, label)
        return
    if not storage_is_shared(reader.storage):
        loaded = _engine.load_folder(target, reader, allow_pickle=allow_pickle, label=label)
        target.set_state(_nested_state(loaded))  # groups forward the states to their actors
        return

    # (part, reader of its folder, subcomponent of the part to restore)
    jobs: list[tuple[RemotePart, _engine.FolderReader, str | None]] = []
    skip: set[str] = set()
    restore_target_locally = True
    for part_path, part in parts.items():
        if label and (label == part_path or label.startswith(part_path + "/")):
            # The target is (inside) this part: `path` is the target's own folder.
            sub = label[len(part_path) + 1 :] or None
            jobs.append((part, _engine.FolderReader(reader.storage, reader.folder), sub))
            restore_target_locally = part.restore_locally
        elif not label or part_path.startswith(label + "/"):
            rel = part_path[len(label) + 1 :] if label else part_path
            part_reader = _descend(reader, rel)
            if part_reader is not None:
                jobs.append((part, part_reader, None))
            if not part.restore_locally:
                skip.add(rel)

    waiters: list[tuple[RemotePart, Waiter]] = []
    try:
        for part, part_reader, sub in jobs:
            waiters.append((part, Once(part.start_load(part_reader, component=sub, allow_pickle=allow_pickle))))
        local = None
        if restore_target_locally:
            with fresh_arrays(target):
                local = _load_local(target, reader, allow_pickle=allow_pickle, label=label, skip=skip)
        for _, waiter in waiters:
            waiter()
    except BaseException:
        for part, waiter in waiters:
            with contextlib.suppress(BaseException):
                waiter()
            with contextlib.suppress(BaseException):
                part.finish_load(apply=False)
        raise
    for part, _ in waiters:  # the actors first: the driver's set_state then syncs from them
        part.finish_load(apply=True)
    if local is not None:
        _engine.apply_loaded(target, local, label)

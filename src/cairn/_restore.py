"""The restore pipeline: read and verify every folder, decode, read tensors into place, then apply.

A restore reads and verifies every folder it needs first, then applies the
states bottom-up, so that a corrupt file never leaves an object half restored.
Which tensor files take one pass and which two: :func:`read_sources`. Delegated
folders (:mod:`cairn.delegation`) are read by their delegates meanwhile, and
applied only once every read passed.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from cairn._ctor_bounds import FolderSizes, check_ctor_args, check_machine
from cairn._delegate_protocol import DelegatedComponent, DelegatedFolder, Once, Waiter
from cairn._reader import FolderReader, PackedTensorFile, ReadRace, open_checkpoint, read_consistently
from cairn._tensorio import MemoryTensorFile, StreamedTensorFile, read_files, verify_files
from cairn._tree import ComponentNode
from cairn.errors import (
    CheckpointError,
    ComponentNotFoundError,
    CorruptCheckpointError,
    IncompatibleCheckpointError,
    at_component,
)
from cairn.manifest import (
    CTOR,
    MANIFEST,
    MAX_JSON_BYTES,
    METADATA,
    Digest,
    FileEntry,
)
from cairn.registry import Trusted, check_recorded_names, class_path, resolve_class

if TYPE_CHECKING:
    from cairn.checkpointable import Checkpointable


@dataclass
class LoadedFolder:
    """A folder's own state (brought to the class's STATE_VERSION) and its loaded components."""

    state: dict[str, Any]
    children: dict[str, LoadedFolder]
    version: int = 0  # the STATE_VERSION recorded in the folder
    where: str = ""  # the folder it was read from, for error messages


def _check_class(target: Checkpointable, reader: FolderReader) -> None:
    recorded = reader.metadata["class"]
    try:
        rec_cls = resolve_class(recorded, where=reader.where(METADATA), expected=type(target))
    except CheckpointError:
        return  # Restoring into an existing object needs only the state, not the class.
    t = type(target)
    if not (issubclass(t, rec_cls) or issubclass(rec_cls, t)):
        raise IncompatibleCheckpointError(
            f"The checkpoint at {reader.where()} holds a {recorded}, which cannot be restored into a "
            f"{class_path(t)}. Restore it into a {rec_cls.__qualname__}, or use "
            f"{rec_cls.__qualname__}.from_checkpoint()."
        )


def upgrade(cls: type[Checkpointable], state: dict[str, Any], from_version: int, where: str) -> dict[str, Any]:
    """Bring a state from ``from_version`` to ``cls.STATE_VERSION``, one step at a time."""
    target = int(cls.STATE_VERSION)
    if from_version == target:
        return state
    if from_version > target:
        raise IncompatibleCheckpointError(
            f"The state at {where} has STATE_VERSION {from_version}, newer than {cls.__qualname__}'s "
            f"STATE_VERSION {target}. Load it with the newer version of the code that wrote it."
        )
    for v in range(from_version, target):
        try:
            new_state = cls.upgrade_state(state, v)
        except IncompatibleCheckpointError:
            raise
        except NotImplementedError as err:
            raise IncompatibleCheckpointError(
                f"The state at {where} has STATE_VERSION {from_version}, but {cls.__qualname__} is at "
                f"version {target} and has no upgrade from version {v} to {v + 1}. Implement "
                f"{cls.__qualname__}.upgrade_state for it."
            ) from err
        except Exception as err:
            raise IncompatibleCheckpointError(
                f"{cls.__qualname__}.upgrade_state failed upgrading the state at {where} from version "
                f"{v} to {v + 1}: {type(err).__name__}: {err}"
            ) from err
        if not isinstance(new_state, dict):
            raise IncompatibleCheckpointError(
                f"{cls.__qualname__}.upgrade_state returned a {type(new_state).__name__} for version {v}; "
                "it must return the state dict."
            )
        state = new_state
    return state


@dataclass
class _VerifiedFolder:
    node: ComponentNode
    reader: FolderReader
    skeleton: bytearray
    tensors: MemoryTensorFile | StreamedTensorFile | None
    children: dict[str, _VerifiedFolder]


def _verify_tree(
    node: ComponentNode,
    reader: FolderReader,
    *,
    allow_pickle: bool,
    opened: list[MemoryTensorFile | StreamedTensorFile],
    skip: frozenset[str] = frozenset(),
) -> _VerifiedFolder:
    """Phase 1: read and verify every file the restore needs, decoding nothing.

    ``skip``: component paths (relative to ``reader``'s folder) not to read.
    """
    _check_class(node.obj, reader)
    reader.check_pickle(allow_pickle)
    # The constructor arguments are not needed to restore, but a damaged file anywhere in
    # the folders being restored must be reported, not left for a later from_checkpoint.
    reader.read(CTOR, max_bytes=MAX_JSON_BYTES)
    skeleton = reader.skeleton()
    tensors = reader.tensor_source()
    if tensors is not None:
        opened.append(tensors)
    comps = node.children
    children: dict[str, _VerifiedFolder] = {}
    for name in reader.manifest.components:
        comp = comps.get(name)
        if comp is None or name in skip:
            continue  # the target has no such component (e.g. fewer modules), or a delegate reads it
        children[name] = _verify_tree(
            comp,
            reader.child(name),
            allow_pickle=allow_pickle,
            opened=opened,
            skip=frozenset(s[len(name) + 1 :] for s in skip if s.startswith(name + "/")),
        )
    return _VerifiedFolder(node, reader, skeleton, tensors, children)


def _decode_tree(v: _VerifiedFolder, allow_pickle: bool, in_place: bool) -> tuple[LoadedFolder, int]:
    """Phase 2: decode every skeleton; arrays are allocated (or live buffers chosen), not yet read.

    A folder goes to live buffers only when every array of its file has a place there
    (see ``Checkpointable.get_state_buffers``); otherwise it is decoded again into fresh
    arrays, so that a checkpoint of another layout never writes into the live object.
    """
    version = v.reader.metadata["state_version"]
    # Read in place only when no upgrade will run: an upgrade may fail or reshape the state.
    target = v.node.obj
    buffers = target.get_state_buffers() if in_place and version == target.STATE_VERSION else None
    unplaced: list[str] = []
    state = v.reader.decode(v.skeleton, v.tensors, allow_pickle, buffers, unplaced=unplaced)
    if unplaced and v.tensors is not None and v.tensors.live:
        v.tensors.forget_plan()
        state = v.reader.decode(v.skeleton, v.tensors, allow_pickle)
    children = {name: _decode_tree(child, allow_pickle, in_place) for name, child in v.children.items()}
    loaded = LoadedFolder(state, {n: c[0] for n, c in children.items()}, version, v.reader.where())
    return loaded, version


def _upgrade_tree(node: ComponentNode, loaded: LoadedFolder, reader: FolderReader) -> None:
    loaded.state = upgrade(type(node.obj), loaded.state, loaded.version, f"{reader.where()} (component {node.label})")
    for name, child in loaded.children.items():
        _upgrade_tree(node.children[name], child, reader.child(name))


def _refusal(node: ComponentNode, loaded: LoadedFolder, method: str, err: Exception) -> CheckpointError:
    """A component's own error about a state read from a file, as the checkpoint's problem to report."""
    return IncompatibleCheckpointError(
        f"{type(node.obj).__qualname__}.{method} failed on the state of component {node.label!r}"
        f"{' read from ' + loaded.where if loaded.where else ''}: {type(err).__name__}: {err}. The "
        "checkpoint's state does not fit this object: it was written by other code, or tampered with."
    )


def check_loaded(node: ComponentNode, loaded: LoadedFolder) -> None:
    """Let every object of ``loaded`` refuse its state (``check_state``), top-down, before anything changes.

    The one walk of these checks: a restore's, over the folders it read, and
    :func:`cairn.state_checks.check_state_tree`'s, over a whole state handed to ``set_state``.
    A component names what is wrong inside its state (``counters/steps: ...``); a refusal
    that does not name the component gets its folder (or path) in front: it does not know it.
    """
    try:
        node.obj.check_state(loaded.state, tuple(loaded.children))
    except CheckpointError as err:
        named = at_component(err, loaded.where or node.path, path=node.path)
        if named is err:
            raise
        raise named from err
    except Exception as err:
        raise _refusal(node, loaded, "check_state", err) from err
    for name, child in loaded.children.items():
        check_loaded(node.children[name], child)


def read_sources(
    sources: list[MemoryTensorFile | StreamedTensorFile],
    *,
    into_new_object: bool,
    before_live: Callable[[], None] | None = None,
) -> None:
    """Verify and read every tensor file of a restore, so that a damaged file never touches live state.

    A file read only into fresh arrays is checked in the pass that reads it (one pass).
    A file some of whose tensors land in buffers the target already had (its
    ``get_state_buffers``) is verified by a pass of its own before any file is read
    into place, and its read is then checked once more: two passes, only there.
    ``into_new_object``: the target was just built by ``from_checkpoint`` and is dropped
    if the restore fails, so its buffers count as fresh. ``before_live``: runs once every
    fresh array is filled and every file verified, before the first byte is read into a
    live buffer (the restore's upgrades and ``check_state`` calls).
    """
    streamed = [s for s in sources if isinstance(s, StreamedTensorFile)]  # in-memory files are verified already
    live = [s for s in streamed if s.live and not into_new_object]
    verify_files(live)
    # Fresh arrays first: their checks all pass before a live buffer is written.
    read_files([s for s in streamed if not (s.live and not into_new_object)])
    if before_live is not None:
        before_live()
    read_files(live)
    for packed in sources:  # tensor files packed with their folder's small files: verified when read
        if isinstance(packed, PackedTensorFile):
            packed.read_all()


def load_folder(
    target: ComponentNode,
    reader: FolderReader,
    *,
    allow_pickle: bool,
    into_new_object: bool = False,
    in_place: bool = True,
    skip: frozenset[str] = frozenset(),
) -> LoadedFolder:
    """Read, verify and decode ``reader``'s folder and the folders of ``target``'s components in it.

    ``target``: the node of the object restored (its path names it in messages).

    Nothing of ``target`` is touched until every file is verified, every state decoded
    and upgraded, and every object has accepted its state (``check_state``, top-down);
    tensors are then read into their live destinations (see :func:`read_sources`).
    ``into_new_object``: ``target`` was just built from this checkpoint and is
    dropped if the restore fails (``from_checkpoint``).

    ``in_place``: tensors may be read straight into the live buffers the components
    offer (``get_state_buffers``), once every file of this call is verified. False
    reads every tensor into fresh arrays and touches nothing of ``target``: for a
    state applied later, after other reads (delegated folders, other processes)
    have passed too. ``skip``: component paths (relative to ``reader``) not read.
    """
    opened: list[MemoryTensorFile | StreamedTensorFile] = []
    try:
        verified = _verify_tree(target, reader, allow_pickle=allow_pickle, opened=opened, skip=skip)
        loaded, _ = _decode_tree(verified, allow_pickle, in_place)

        def before_live() -> None:
            # Upgrades run on folders read into fresh arrays only (see _decode_tree), all filled by now.
            _upgrade_tree(target, loaded, reader)
            check_loaded(target, loaded)

        read_sources(opened, into_new_object=into_new_object, before_live=before_live)
    finally:
        for source in opened:
            source.close()
    return loaded


def apply_loaded(node: ComponentNode, loaded: LoadedFolder) -> None:
    """Apply loaded states bottom-up: components first, then the object's own state."""
    for name, child in loaded.children.items():
        apply_loaded(node.children[name], child)
    try:
        node.obj.set_state(loaded.state)
    except CheckpointError:
        raise
    except Exception as err:
        # A state read from a file that does not fit (other code wrote it, or it was tampered
        # with) is the checkpoint's problem to report, never a raw TypeError from deep inside.
        raise IncompatibleCheckpointError(
            f"{_refusal(node, loaded, 'set_state', err)} Its components were restored before it "
            "(bottom-up), so the object is partly restored: discard it, or restore it again from a checkpoint "
            "that fits (from_checkpoint never returns such an object). A check_state method that refuses what "
            "set_state refuses prevents this."
        ) from err


def restore(
    obj: Checkpointable,
    path: str | os.PathLike[str],
    *,
    component: str | None,
    filesystem: Any,
    allow_pickle: bool,
    built_from: bytes | None = None,
    signed_root: FileEntry | None = None,
) -> None:
    """Restore ``obj`` (or its subcomponent ``component``) from the checkpoint folder ``path``.

    ``built_from``: ``obj`` was just constructed by ``from_checkpoint`` from the
    checkpoint whose root manifest is these bytes. The restore then reads that
    version or fails with a race for ``from_checkpoint`` to retry with a new object,
    and reads tensor files into ``obj``'s buffers in one pass (a failed restore
    drops ``obj``).

    Delegated folders below ``obj`` (:mod:`cairn.delegation`) are read by their
    delegates while this process reads the rest into fresh arrays; every delegate
    applies, then ``obj``'s part is applied, only once every read passed.
    """
    # The one tree of this restore: every phase below walks it, none asks the objects again.
    tree = ComponentNode(obj)
    target = tree.find(component) if component else tree
    reader = open_checkpoint(path, filesystem, expected=signed_root)
    parts = tree.delegations()

    def read(r: FolderReader, *, into_new_object: bool = False) -> _Read:
        return _read(target, r, allow_pickle=allow_pickle, parts=parts, into_new_object=into_new_object)

    if built_from is None:
        done = read_consistently(reader, read)
    else:
        # Any retry must build a new object, so the race goes back to from_checkpoint.
        try:
            if reader.manifest_bytes() != built_from:
                raise ReadRace(
                    CheckpointError(f"{reader.where(MANIFEST)} changed after the object was built."), changed=True
                )
            done = read(reader, into_new_object=True)
        except CorruptCheckpointError as err:
            raise ReadRace(err, changed=reader.changed()) from err
    for delegate in done.delegates:  # first: the owners' set_state may then sync from them
        delegate.finish_load(apply=True)
    if done.local is not None:
        apply_loaded(target, done.local)


@dataclass
class _Read:
    """What a restore read: this process's part (None: nothing here) and the delegates holding theirs."""

    local: LoadedFolder | None
    delegates: list[DelegatedComponent] = field(default_factory=list)


def _entry_of(reader: FolderReader) -> FileEntry:
    """The entry that seals ``reader``'s manifest as read, in the manifest's own format."""
    data = reader.manifest_bytes()
    return FileEntry(len(data), Digest.of(data, reader.manifest.algorithm))


def _delegated_jobs(
    reader: FolderReader, label: str, parts: dict[str, DelegatedComponent]
) -> tuple[list[tuple[DelegatedComponent, DelegatedFolder, str | None]], frozenset[str], bool]:
    """Which delegates read which folders for a restore of ``label`` from ``reader``'s folder.

    Returns the jobs ``(delegate, folder, subcomponent of the delegated one)``, the
    folders this process leaves out (relative to ``reader``), and whether this
    process restores the target at all (not when the target lies inside a delegated
    folder whose delegate restores it alone).
    """
    jobs: list[tuple[DelegatedComponent, DelegatedFolder, str | None]] = []
    skip: set[str] = set()
    local = True
    for part_path, part in parts.items():
        if label and (label == part_path or label.startswith(part_path + "/")):
            # The target is (inside) this delegated component: ``reader`` is the target's own folder.
            sub = label[len(part_path) + 1 :] or None
            folder = DelegatedFolder(reader.storage, reader.folder, reader.folder, part_path, _entry_of(reader))
            jobs.append((part, folder, sub))
            local = part.restores_local_copy
        elif not label or part_path.startswith(label + "/"):
            rel = part_path[len(label) + 1 :] if label else part_path
            current = reader
            try:
                for name in rel.split("/"):  # verifies the manifests down to the delegated folder
                    current = current.child(name)
            except ComponentNotFoundError:
                continue  # a component whose folder is missing is left as it is
            folder = DelegatedFolder(current.storage, current.folder, reader.folder, part_path, current.expected)
            jobs.append((part, folder, None))
            if not part.restores_local_copy:
                skip.add(rel)
    return jobs, frozenset(skip), local


def _read(
    target: ComponentNode,
    reader: FolderReader,
    *,
    allow_pickle: bool,
    parts: dict[str, DelegatedComponent],
    into_new_object: bool,
) -> _Read:
    """Read and verify everything a restore needs, here and in the delegates; apply nothing."""
    jobs, skip, local = _delegated_jobs(reader, target.path, parts) if parts else ([], frozenset(), True)
    if not jobs:
        return _Read(load_folder(target, reader, allow_pickle=allow_pickle, into_new_object=into_new_object))
    started: list[tuple[DelegatedComponent, Waiter]] = []
    try:
        for delegate, folder, sub in jobs:
            started.append((delegate, Once(delegate.start_load(folder, component=sub, allow_pickle=allow_pickle))))
        loaded: LoadedFolder | None = None
        if local:
            # Fresh arrays: live buffers would change before the delegates' reads passed.
            loaded = load_folder(target, reader, allow_pickle=allow_pickle, in_place=False, skip=skip)
        for _, waiter in started:
            waiter()
    except BaseException:
        # Every delegate done and holding nothing before the error goes up; their own failures
        # matter less than the one being raised.
        for delegate, waiter in started:
            with contextlib.suppress(BaseException):
                waiter()
            with contextlib.suppress(BaseException):
                delegate.finish_load(apply=False)
        raise
    return _Read(loaded, [delegate for delegate, _ in started])


def build_from_checkpoint(
    cls: type[Checkpointable],
    path: str | os.PathLike[str],
    *,
    filesystem: Any,
    allow_pickle: bool,
    ctor_overrides: dict[str, Any],
    signed_root: FileEntry | None = None,
    trusted: Trusted | None = None,
) -> Checkpointable:
    """Construct the recorded class with the recorded (or overridden) arguments, then restore it.

    Constructor arguments and state come from one version of the checkpoint, even when
    another process saves over ``path`` meanwhile (see :func:`read_consistently`). Every
    class or function they name resolves through the allow-list with ``trusted`` (SPEC 8),
    before anything is constructed.
    """
    return read_consistently(
        open_checkpoint(path, filesystem, expected=signed_root),
        lambda reader: _build_once(
            cls,
            reader,
            path,
            filesystem=filesystem,
            allow_pickle=allow_pickle,
            ctor_overrides=ctor_overrides,
            trusted=trusted,
        ),
    )


def _folder_sizes(reader: FolderReader) -> FolderSizes:
    """What ``reader``'s folder holds, from its verified manifests (no data file is read)."""
    own = reader.manifest.own_sizes()
    total, stack = 0, [reader]
    while stack:
        r = stack.pop()
        total += sum(e.size for e in r.manifest.files.values())
        stack.extend(r.child(c) for c in r.manifest.components)
    return FolderSizes(files=own, components=tuple(reader.manifest.components), tree_bytes=total)


def _build_once(
    cls: type[Checkpointable],
    reader: FolderReader,
    path: str | os.PathLike[str],
    *,
    filesystem: Any,
    allow_pickle: bool,
    ctor_overrides: dict[str, Any],
    trusted: Trusted | None,
) -> Checkpointable:
    import inspect

    reader.check_pickle(allow_pickle)
    recorded = reader.metadata["class"]
    # The class the caller passed may be taken even from a script's __main__: the caller chose it.
    rec_cls = resolve_class(recorded, where=reader.where(METADATA), expected=cls, trusted=trusted)
    if not issubclass(rec_cls, cls):
        raise IncompatibleCheckpointError(
            f"The checkpoint at {reader.where()} holds a {recorded}, which is not a "
            f"{class_path(cls)} (nor a subclass). Load it with {rec_cls.__qualname__}.from_checkpoint() "
            "or cairn.Checkpointable.from_checkpoint()."
        )
    args, kwargs = reader.ctor(allow_pickle, trusted)
    # What the recorded arguments name by reference (a config's connector factories, callbacks,
    # mapping functions) resolves through the allow-list now, before anything is built (SPEC 8).
    check_recorded_names(rec_cls, args, kwargs, trusted=trusted, where=reader.where(CTOR))
    if hasattr(rec_cls, "ctor_args_problem"):
        # What the constructor will allocate, bounded by what the folder holds (SPEC 8), before it
        # runs. The recorded arguments are checked, overridden or not: a file that records more
        # than it could hold is hostile whatever replaces it.
        check_ctor_args(rec_cls, args, kwargs, _folder_sizes(reader), where=reader.where(CTOR))
    if ctor_overrides:
        try:
            sig = inspect.signature(rec_cls)
            bound = sig.bind_partial(*args, **kwargs)
        except (TypeError, ValueError) as err:
            raise IncompatibleCheckpointError(
                f"The constructor arguments recorded at {reader.where(CTOR)} no longer fit "
                f"{rec_cls.__qualname__}{inspect.signature(rec_cls)}: {err}."
            ) from err
        params = sig.parameters
        takes_var_kw = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
        for key, value in ctor_overrides.items():
            if key in params and params[key].kind not in (
                inspect.Parameter.VAR_POSITIONAL,
                inspect.Parameter.VAR_KEYWORD,
            ):
                bound.arguments[key] = value
            elif takes_var_kw:
                bound.arguments.setdefault(
                    next(n for n, p in params.items() if p.kind is inspect.Parameter.VAR_KEYWORD), {}
                )[key] = value
            else:
                raise CheckpointError(
                    f"{key!r} is not a constructor parameter of {rec_cls.__qualname__}; it takes: "
                    f"{', '.join(params) or '(nothing)'}."
                )
        args, kwargs = bound.args, bound.kwargs
    # Counts that start processes, threads or actors fit this machine, unless the caller passed them.
    check_machine(rec_cls, args, kwargs, overridden=frozenset(ctor_overrides), where=reader.where(CTOR))
    try:
        obj = rec_cls(*args, **kwargs)
    except CheckpointError:
        raise
    except Exception as err:  # the arguments come from a file: any error is the checkpoint's to report
        raise IncompatibleCheckpointError(
            f"Cannot construct {rec_cls.__qualname__} with the arguments recorded at "
            f"{reader.where(CTOR)}: {type(err).__name__}: {err}. Pass the changed arguments as keywords "
            "to from_checkpoint()."
        ) from err
    obj._restore_checkpoint(
        path, component=None, filesystem=filesystem, allow_pickle=allow_pickle, built_from=reader.manifest_bytes()
    )
    return obj

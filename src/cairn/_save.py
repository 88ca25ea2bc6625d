"""Planning and writing a save.

A save first plans the whole tree (gets the state, encodes every folder) so
that an unsupported value fails before anything is written; then it claims the
storage's staging place, starts the delegates of delegated folders
(:mod:`cairn.delegation`), writes each other folder bottom-up (children, own
files, the delegates' manifest entries, own manifest) and commits.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import logging
import os
import platform
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from cairn._crc import crc32
from cairn._delegate_protocol import DelegatedComponent, DelegatedFolder, Once, Waiter
from cairn._reader import FolderReader
from cairn._tree import checkpointable_components, delegated_components, delegations
from cairn._version import __version__
from cairn.codec.tensors import build_header
from cairn.errors import CheckpointError, CorruptCheckpointError
from cairn.manifest import (
    CTOR,
    DIGEST_ALGORITHM,
    EMPTY_STATE,
    FORMAT_VERSION,
    MANIFEST,
    MAX_COMPONENT_DEPTH,
    METADATA,
    PACK,
    PACK_TENSOR_BYTES,
    PACKED_MEMBERS,
    STANDARD_METADATA_KEYS,
    STATE,
    TENSORS,
    FileEntry,
    Hasher,
    Manifest,
    check_digest_algorithm,
    indented_json,
)
from cairn.registry import class_path, register_passed
from cairn.storage.base import Chunk, FileStamp, Storage
from cairn.storage.resolve import resolve_storage

if TYPE_CHECKING:
    from cairn.checkpointable import Checkpointable
    from cairn.codec.state import EncodedState

_LOG = logging.getLogger(__name__)
"""``cairn._save``: warning, a file of the previous checkpoint that a save could not link (docs/cli.md, "Logging")."""

# numpy, msgpack and the codecs are imported inside the functions that encode or
# decode, so that reading manifests and metadata (cairn inspect, ls) stays fast.

PACK_SMALL_FILES = True
"""Whether a save packs each folder's small own files into one :data:`cairn.manifest.PACK` (see :func:`_packed`).

False writes each as a file of its own, the format 3 layout of cairn before packing, which every
cairn still reads; the tests of the per-file readers' defences (a hostile ``state.msgpack``, a
``tensors.safetensors`` swapped for a link) set it so that they can tamper with one file."""


def _frameworks() -> dict[str, str]:
    import numpy as np

    out = {"python": platform.python_version(), "numpy": np.__version__}
    for mod in ("torch", "gymnasium"):
        m = sys.modules.get(mod)
        if m is not None:
            out[mod] = str(getattr(m, "__version__", "unknown"))
    return out


# --------------------------------------------------------------------------- save


@dataclass
class _PlannedFolder:
    files: dict[str, list[Chunk]]
    children: dict[str, _PlannedFolder] = field(default_factory=dict)
    packed: dict[str, tuple[int, int]] = field(default_factory=dict)  # member -> (offset, size) in files[PACK]
    array_bytes: int = 0
    delegate: DelegatedComponent | None = None  # set: the folder is the delegate's to write (no files here)
    allow_pickle: bool = False  # passed on to the delegates


def _delegated_nodes(plan: _PlannedFolder, prefix: str = "") -> list[tuple[str, _PlannedFolder]]:
    """``(component path, planned folder)`` of every delegated folder of a plan."""
    out: list[tuple[str, _PlannedFolder]] = []
    for name, child in plan.children.items():
        path = f"{prefix}/{name}" if prefix else name
        out += [(path, child)] if child.delegate is not None else _delegated_nodes(child, path)
    return out


def _tensor_chunks(encoded: EncodedState) -> list[Chunk]:
    header = build_header(encoded.tensors, {"format": "cairn"})
    return [header, *(memoryview(e.data.data) for e in encoded.tensors if e.data.nbytes)]


def _json_bytes(obj: Any) -> bytes:
    return indented_json(obj, sort_keys=False)


def _ctor_json_bytes(obj: Any) -> bytes:
    # One line: without ``indent``, json's C encoder runs (about 10x the pure-Python one that
    # any indent selects), and an RL algorithm's ctor.json (its whole config, with type tags,
    # in four folders) was a third of a small save's encoding time. `cairn inspect` shows it.
    return json.dumps(obj, allow_nan=False).encode("utf-8") + b"\n"


def plan_save(
    obj: Checkpointable,
    state: Any,
    *,
    allow_pickle: bool,
    where: str = "",
    extra_metadata: dict[str, Any] | None = None,
    delegate: bool = False,
    ctor_memo: dict[int, tuple[Any, Any, bool]] | None = None,
) -> _PlannedFolder:
    """Encode ``obj``'s folder and its components' folders, writing nothing.

    ``extra_metadata`` (the root only) is merged into ``metadata.json``; the
    manager records steps and metrics there. With ``delegate``, the folders of
    delegated components (``get_delegated_components``) are planned as the
    delegates' to write, whatever ``state`` holds for them. ``ctor_memo``: the
    encoded constructor arguments of this plan so far (made here for the root;
    see :class:`cairn.codec.ctor.CtorEncoder`).
    """
    from cairn.codec.ctor import encode_ctor
    from cairn.codec.state import encode_state

    label = where or "<root>"
    ctor_memo = {} if ctor_memo is None else ctor_memo
    _check_plannable(obj, state, where)
    comps = checkpointable_components(obj, where=label)
    own = {k: v for k, v in state.items() if k not in comps}
    try:
        encoded = encode_state(own, allow_pickle=allow_pickle)
    except CheckpointError as err:
        if where:
            raise CheckpointError(f"In component {where!r}: {err}") from err
        raise
    args, kwargs = obj.get_ctor_args_and_kwargs()
    try:
        ctor, ctor_pickle = encode_ctor(args, kwargs, allow_pickle=allow_pickle, memo=ctor_memo)
    except CheckpointError as err:
        raise CheckpointError(f"{type(obj).__qualname__} at {label}: {err}") from err
    delegated = delegated_components(obj, where=label) if delegate else {}
    children: dict[str, _PlannedFolder] = {}
    for name, comp in comps.items():
        if name in delegated:
            children[name] = _PlannedFolder(files={}, delegate=delegated[name], allow_pickle=allow_pickle)
        elif name in state:
            children[name] = plan_save(
                comp,
                state[name],
                allow_pickle=allow_pickle,
                where=f"{where}/{name}" if where else name,
                delegate=delegate,
                ctor_memo=ctor_memo,
            )
    meta_bytes = _metadata_bytes(
        obj,
        uses_pickle=bool(encoded.used_pickle or ctor_pickle),
        has_tensors=bool(encoded.tensors),
        components=sorted(children),
        extra_metadata=extra_metadata,
    )
    files: dict[str, list[Chunk]] = {}
    if encoded.tensors or encoded.skeleton != EMPTY_STATE:
        # No file for an empty own state (format 3; readers take its absence as {}): five of an
        # RL algorithm's eight folders hold only components, and a file costs a create.
        files[STATE] = [encoded.skeleton]
    files[CTOR] = [_ctor_json_bytes(ctor)]
    if encoded.tensors:
        files[TENSORS] = _tensor_chunks(encoded)
    files[METADATA] = [meta_bytes]
    files, packed = _packed(files) if PACK_SMALL_FILES else (files, {})
    return _PlannedFolder(
        files=files, children=children, packed=packed, array_bytes=encoded.num_array_bytes, allow_pickle=allow_pickle
    )


def _packed(files: dict[str, list[Chunk]]) -> tuple[dict[str, list[Chunk]], dict[str, tuple[int, int]]]:
    """A folder's own files with the small ones end to end in one :data:`PACK` file, and their offsets and sizes.

    Every file costs a create (and an entry, a digest and a read on restore): a small folder's
    three become one (``metadata.json`` stays a file of its own). A tensor file over
    :data:`PACK_TENSOR_BYTES` keeps its own file, so that big checkpoints keep their layout
    (linked when unchanged, streamed on restore).
    The chunks are the same objects (no copy): an async save's snapshot copies them as before.
    """
    chunks: list[Chunk] = []
    packed: dict[str, tuple[int, int]] = {}
    rest: dict[str, list[Chunk]] = {}
    offset = 0
    for name in PACKED_MEMBERS:
        member = files.get(name)
        if member is None:
            continue
        size = sum(memoryview(c).nbytes for c in member)
        if name == TENSORS and size > PACK_TENSOR_BYTES:
            rest[name] = member
            continue
        packed[name] = (offset, size)
        chunks += member
        offset += size
    rest.update((name, member) for name, member in files.items() if name not in PACKED_MEMBERS)
    return {PACK: chunks, **rest}, packed


def _check_plannable(obj: Checkpointable, state: Any, where: str) -> None:
    """Refuse a component nested too deep to read back, or a state that is not a dict."""
    if where and where.count("/") + 1 > MAX_COMPONENT_DEPTH:
        raise CheckpointError(
            f"{type(obj).__qualname__} at {where[:200]}... nests components more than {MAX_COMPONENT_DEPTH} "
            "levels deep, which cairn refuses (a reader could not tell it from a hostile checkpoint). "
            "Flatten the component tree."
        )
    if not isinstance(state, dict):
        raise CheckpointError(
            f"{type(obj).__qualname__}.get_state() at {where or '<root>'} returned a {type(state).__name__}; "
            "a state must be a dict."
        )


def _metadata_bytes(
    obj: Checkpointable,
    *,
    uses_pickle: bool,
    has_tensors: bool,
    components: list[str],
    extra_metadata: dict[str, Any] | None,
) -> bytes:
    """A folder's ``metadata.json``: the standard keys, then ``obj``'s own, then ``extra_metadata``."""
    user_meta = obj.get_metadata()
    if not isinstance(user_meta, dict):
        raise CheckpointError(f"{type(obj).__qualname__}.get_metadata() must return a dict.")
    clash = STANDARD_METADATA_KEYS & set(user_meta)
    if clash:
        raise CheckpointError(
            f"{type(obj).__qualname__}.get_metadata() returns the reserved keys {sorted(clash)}; rename them."
        )
    # The program built and saved an object of this class: a load in this program may build it
    # again (SPEC 8: saving and continuing in one process needs nothing extra; a fresh process
    # allows it by cairn.register or trusted=).
    register_passed(type(obj))
    metadata: dict[str, Any] = {
        "format_version": FORMAT_VERSION,
        "cairn_version": __version__,
        "class": class_path(type(obj)),
        "state_version": int(type(obj).STATE_VERSION),
        "frameworks": _frameworks(),
        "created": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "uses_pickle": uses_pickle,
        "has_tensors": has_tensors,
        "components": components,
        **user_meta,
        **(extra_metadata or {}),
    }
    try:
        return _json_bytes(metadata)
    except (TypeError, ValueError) as err:
        raise CheckpointError(f"{type(obj).__qualname__}.get_metadata() is not JSON-able: {err}") from err


def plan_checkpoint(
    obj: Checkpointable,
    *,
    state: dict[str, Any] | None,
    allow_pickle: bool,
    extra_metadata: dict[str, Any] | None = None,
) -> _PlannedFolder:
    """Plan a save of ``obj``: of ``state`` when given, else of ``obj.get_state()`` with delegation.

    With ``state=None`` the engine asks for the state itself, leaving out the
    delegated components (their delegates write them); a given ``state`` is
    written as it is (components missing from it are not written). An async
    save then calls :func:`snapshot_plan` before it returns.
    """
    delegate = state is None
    if state is None:
        paths = delegations(obj)
        state = obj.get_state(not_components=sorted(paths)) if paths else obj.get_state()
    return plan_save(obj, state, allow_pickle=allow_pickle, extra_metadata=extra_metadata, delegate=delegate)


class BufferPool:
    """Buffers of an earlier snapshot (:func:`snapshot_plan`), reused by the next one.

    Fresh memory is expensive (page faults and zeroing run at a fraction of memcpy
    speed), so an async save copies into the buffers the previous save used, once
    that save is committed (:meth:`give_back`). With at most one save in flight,
    the pool holds at most one state's worth of memory.
    """

    def __init__(self) -> None:
        """An empty pool."""
        self._free: dict[int, list[Any]] = {}

    def take(self, nbytes: int) -> Any:
        """A uint8 buffer of ``nbytes`` bytes: a free one of that size, else a new one."""
        import numpy as np

        bufs = self._free.get(nbytes)
        return bufs.pop() if bufs else np.empty(nbytes, dtype=np.uint8)

    def give_back(self, taken: list[Any]) -> None:
        """Return the buffers of a committed (or failed) snapshot; the ones not returned are dropped."""
        self._free = {}
        for buf in taken:
            self._free.setdefault(int(buf.nbytes), []).append(buf)


def snapshot_plan(plan: _PlannedFolder, pool: BufferPool) -> list[Any]:
    """Copy every byte of the plan that the caller's objects still own; return the buffers used.

    A plan is the state as the codec encoded it: its skeletons, constructor and
    metadata files are ``bytes`` of its own, and its tensor files are views of the
    arrays the state holds, wherever the codec found them (nested lists, tuples
    and dicts, the fields of a registered type, numpy arrays, torch tensors). Each
    such view is copied here, so that whatever the codec accepts is snapshotted by
    construction: there is no second walk of the state to get out of step with the
    codec's. Called by an async save before it returns; training may then change
    any array without touching the checkpoint being written.
    """
    taken: list[Any] = []

    def copy(folder: _PlannedFolder) -> None:
        for chunks in folder.files.values():
            for i, chunk in enumerate(chunks):
                if type(chunk) is bytes:  # immutable, and owned by the plan
                    continue
                view = memoryview(chunk).cast("B")
                buf = pool.take(view.nbytes)
                memoryview(buf.data).cast("B")[:] = view
                taken.append(buf)
                chunks[i] = memoryview(buf.data).cast("B")
        for child in folder.children.values():
            copy(child)

    copy(plan)
    return taken


@dataclass
class WriteStats:
    """What a save wrote: bytes sent to storage and bytes reused from the previous checkpoint."""

    bytes_written: int = 0
    bytes_linked: int = 0
    files_written: int = 0
    files_linked: int = 0
    bytes_reread: int = 0  # of the linked bytes: those read back first to check them (see CheckedFiles)
    files_vouched: int = 0  # linked files not read back, on the word of their stamps (see CheckedFiles)
    root: FileEntry | None = None  # the root manifest this save committed (size and digest), once committed
    previous_damaged: bool = (
        False  # a file of the previous checkpoint failed its check: it no longer counts as verified
    )

    @property
    def fully_checked(self) -> bool:
        """Whether every byte of the checkpoint was hashed by this save (written, or linked after a read-back).

        Such a checkpoint was verified after its write as far as this process can tell;
        retention keeps the newest one (see :meth:`cairn.CheckpointManager.save`).
        """
        return self.files_vouched == 0


class CheckedFiles:
    """Files of earlier checkpoints that this process read back and found matching their manifests.

    Damage never spreads (SPEC 8): a save links a previous checkpoint's file only if
    it still holds the bytes its manifest records. Reading every such file back at
    every save costs as much as the state (a 1.2 GB replay buffer re-read to write
    its 72 MB of new rows), so a file read back once is remembered by its stamp
    (:meth:`cairn.storage.base.Storage.stamp`: device, inode, size, mtime and ctime)
    and linked without reading it again while the stamp stays the same, for at most
    ``window`` saves: every ``window``-th save reads every linked file back.

    Why that is sound:

    * any write through the filesystem changes mtime and ctime, and putting the
      mtime back with ``os.utime`` changes the ctime, which no call sets back. The
      manager's own links and deletes change the ctime too: once a save and its
      retention are done, :meth:`refresh` takes the new ctime of each file linked,
      if its size and mtime are unchanged. So a file changed through the filesystem
      between two saves is read back at the next one;
    * racy stamps (as git's index has them): a file whose mtime or ctime lies less
      than its stamp's ``settle_ns`` before the moment it was stamped for the check
      could still be written within the same timestamp tick without its stamp
      changing; it is not remembered, and is read back again next time. That time
      is 2 s unless the storage knows the filesystem's clock: a local disk with
      sub-millisecond timestamps, stamped from this kernel's clock, settles in four
      clock ticks (:meth:`cairn.storage.base.FileStamp.settled`);
    * the files a save wrote are remembered too (on a local disk their digest is of
      the bytes read back as they were written; elsewhere :func:`check_written` reads
      each back before the commit and compares the CRC-32 of what it reads with that
      of the bytes it digested): the next save links them without
      reading them again. A CRC-32 tells accidents, not forgeries; a file replaced
      (F5 of issue 33) is another inode, and a file changed in place another ctime,
      both of which the stamp tells;
    * bytes changed underneath the filesystem (a failing disk) keep their stamp:
      the re-read every ``window`` saves catches them, and until a save has read
      every file back (:attr:`WriteStats.fully_checked`), the manager keeps the
      newest checkpoint that did, whatever its retention policy says;
    * the record lives in this process only (one per :class:`cairn.CheckpointManager`):
      files another process wrote or checked are always read back.
    """

    def __init__(self, window: int = 3) -> None:
        """Vouch for a file by its stamp in at most ``window - 1`` saves after the one that read it."""
        if window < 1:
            raise ValueError(f"window must be at least 1, got {window}.")
        self.window = window
        self._saves = 0
        # file_id -> (size, mtime_ns, ctime_ns, entry, path of its newest link relative to the save's root)
        self._known: dict[tuple[int, ...], tuple[int, int, int, FileEntry, str | None]] = {}

    def new_save(self) -> None:
        """Count a save; every ``window``-th forgets every stamp, so that it reads every linked file back."""
        if self._saves % self.window == 0:
            self._known.clear()
        self._saves += 1

    def vouch(self, stamp: FileStamp | None, entry: FileEntry) -> bool:
        """Whether a file of this stamp was checked earlier and found holding ``entry``'s bytes."""
        if stamp is None:
            return False
        known = self._known.get(stamp.file_id)
        return (
            known is not None
            and known[:3] == (stamp.size, stamp.mtime_ns, stamp.ctime_ns)
            and known[3].same_bytes(entry)
        )

    def note(self, stamp: FileStamp | None, entry: FileEntry, checked_at_ns: int, rel_path: str | None = None) -> None:
        """Remember a file found matching ``entry`` by a read that began at ``checked_at_ns`` (stamp taken first).

        ``rel_path``: the file's path in the checkpoint being written, when this save wrote
        it (:meth:`refresh` keeps it); a file linked gets its path from :meth:`linked`.
        """
        if stamp is None:
            return
        if stamp.size == entry.size and stamp.settled(checked_at_ns):
            self._known[stamp.file_id] = (stamp.size, stamp.mtime_ns, stamp.ctime_ns, entry, rel_path)
        else:
            self._known.pop(stamp.file_id, None)

    def linked(self, stamp: FileStamp | None, rel_path: str) -> None:
        """Note that this save linked a known file as ``rel_path`` (relative to the checkpoint being written)."""
        if stamp is None:
            return
        known = self._known.get(stamp.file_id)
        if known is not None:
            self._known[stamp.file_id] = (*known[:4], rel_path)

    def refresh(self, stamp_of: Callable[[str], FileStamp | None]) -> None:
        """Once a save and its retention are done: take the ctime this manager's links and deletes gave each file.

        ``stamp_of(rel_path)`` stamps a file of the checkpoint just committed. A file
        this save neither linked nor wrote, or whose identity, size or mtime changed, is forgotten.
        """
        fresh: dict[tuple[int, ...], tuple[int, int, int, FileEntry, str | None]] = {}
        for file_id, (size, mtime_ns, _, entry, rel) in self._known.items():
            if rel is None:
                continue
            try:
                stamp = stamp_of(rel)
            except (OSError, CheckpointError):
                continue
            if stamp is not None and stamp.file_id == file_id and (stamp.size, stamp.mtime_ns) == (size, mtime_ns):
                fresh[file_id] = (size, mtime_ns, stamp.ctime_ns, entry, None)
        self._known = fresh

    def forget(self, stamp: FileStamp | None) -> None:
        """Drop what is known of a file (it failed its check)."""
        if stamp is not None:
            self._known.pop(stamp.file_id, None)


def _previous_entry(previous: FolderReader | None, name: str) -> FileEntry | None:
    if previous is None:
        return None
    try:
        return previous.manifest.files.get(name)
    except CheckpointError:
        return None  # an unreadable previous checkpoint is simply not reused


def write_planned(
    storage: Storage,
    folder: str,
    plan: _PlannedFolder,
    *,
    previous: FolderReader | None = None,
    stats: WriteStats | None = None,
    before_manifest: Callable[[], None] | None = None,
    waiters: dict[str, Waiter] | None = None,
    where: str = "",
    checked: CheckedFiles | None = None,
    written: list[tuple[str, FileEntry, list[Chunk]]] | None = None,
    digest: str = DIGEST_ALGORITHM,
) -> FileEntry:
    """Write a planned folder bottom-up; return its manifest's entry for the parent.

    Every file and manifest is digested with ``digest`` (BLAKE3 or SHA-256: one per tree).
    ``written`` collects ``(path, entry, chunks)`` of each file written (not linked), for :func:`check_written`.

    With ``previous`` (the same component's folder in an earlier checkpoint), a
    file whose size and digest match is hard-linked or copied server-side
    instead of written again, once it is read back and found sound (or
    ``checked`` vouches for it: see :class:`CheckedFiles`). ``before_manifest`` runs just before this folder's
    own manifest is written (the root's is the commit marker on object stores).
    ``waiters``: component path (below the root of the save, ``where`` being this
    folder's) -> the waiter of the delegate writing that delegated folder; it is
    waited for after this folder's own files, and its entry goes in the manifest.
    """
    stats = stats if stats is not None else WriteStats()
    storage.makedirs(folder)
    manifest = Manifest(digest=digest, packed=dict(plan.packed))
    delegated: list[str] = []
    for name, child in plan.children.items():
        path = f"{where}/{name}" if where else name
        manifest.components.append(name)
        if child.delegate is not None:
            delegated.append(name)
            continue
        prev_child = None
        if previous is not None:
            try:
                prev_child = previous.child(name) if previous.manifest.has_component(name) else None
            except CheckpointError:
                prev_child = None
        manifest.files[f"{name}/{MANIFEST}"] = write_planned(
            storage,
            storage.join(folder, name),
            child,
            previous=prev_child,
            stats=stats,
            waiters=waiters,
            where=path,
            checked=checked,
            written=written,
            digest=digest,
        )
    for fname, chunks in plan.files.items():
        dst = storage.join(folder, fname)
        linked = _link_unchanged(storage, dst, fname, chunks, previous, stats, checked, where, digest)
        if linked is not None:
            manifest.files[fname] = linked
            continue
        entry = storage.write_file(dst, chunks, algorithm=digest)
        stats.bytes_written += entry.size
        stats.files_written += 1
        manifest.files[fname] = entry
        if written is not None:
            written.append((dst, entry, chunks))
    for name in delegated:  # the delegates wrote meanwhile; their entries seal their folders
        manifest.files[f"{name}/{MANIFEST}"] = _delegate_entry(f"{where}/{name}" if where else name, waiters)
    data = manifest.to_bytes()
    if before_manifest is not None:
        before_manifest()
    path = storage.join(folder, MANIFEST)
    entry = storage.write_file(path, [data], algorithm=digest)
    if written is not None and where:  # the root manifest commits (object stores): it is checked before
        written.append((path, entry, [data]))
    return entry


def _delegate_entry(path: str, waiters: dict[str, Waiter] | None) -> FileEntry:
    """Wait for the delegate writing the folder at component ``path``; the entry of its manifest."""
    if waiters is None or path not in waiters:
        raise CheckpointError(f"The delegated folder {path!r} was planned but its delegate was never started.")
    entry = waiters[path]()
    if not isinstance(entry, FileEntry):
        raise CheckpointError(
            f"The delegate of component {path!r} returned {entry!r} from its save instead of the "
            "FileEntry of the folder's manifest.json (what cairn.delegation.write_folder returns)."
        )
    return entry


def check_written(
    storage: Storage,
    written: list[tuple[str, FileEntry, list[Chunk]]],
    checked: CheckedFiles | None = None,
    root: str = "",
) -> None:
    """Check that each file written holds the bytes its digest records, before the save commits.

    A digest computed as the bytes go out misses a change made meanwhile (an array of a
    synchronous save changed by another thread): the file would fail its own manifest,
    and a manager's retention would count it as good. The bytes sent are read again
    from memory (object stores). Local disks need no check
    (:attr:`~cairn.storage.base.Storage.digests_written_bytes`): ``write_file`` digests
    each byte as read back from the file, so a racing thread leaves a checkpoint that
    verifies, holding each value as it was when its bytes were written.

    What is compared is the CRC-32 that ``write_file`` computed over exactly the bytes
    it digested, in the same pass, with the CRC-32 of the bytes read back (ISA-L's,
    about ten times the digest's speed): a check against accidents (the racing
    thread), not forgers, who would have to be writing this process's memory. An entry
    without one (a storage that records none) is checked by its digest.

    ``checked`` (with ``root``, the folder the paths of ``written`` lie under) remembers
    each local file by its stamp (taken before any read), so that the next save links
    it without reading it again (see :class:`CheckedFiles`).

    Raises:
        CorruptCheckpointError: A file does not hold the bytes its digest records.
    """
    from cairn._tensorio import crc_fd, digest_fd

    for path, entry, chunks in written:
        if checked is None and all(type(c) is bytes for c in chunks):
            # Immutable bytes the plan owns (manifests, metadata, constructors, skeletons, headers):
            # no thread can change them during the write, and the digest was taken of exactly the
            # bytes written. A manager's save (``checked``) still reads them back, to link them next
            # time without a read (see CheckedFiles); here only their size is checked (_check_size).
            _check_size(storage, path, entry)
            continue
        crc, digest = 0, None
        stamp, started = None, 0
        if storage.digests_written_bytes:  # the digest is of the bytes the file holds: nothing to compare
            _note_written(storage, path, entry, checked, root)
            continue
        if storage.file_descriptors:
            if checked is not None and path.startswith(root + "/"):
                stamp, started = storage.stamp(path), time.time_ns()
            fd = storage.open_regular(path)
            try:
                st = os.fstat(fd)
                if stamp is not None and (stamp.file_id, stamp.size) != ((st.st_dev, st.st_ino), st.st_size):
                    stamp = None  # not the file stamped: nothing is remembered of it
                if entry.crc32 is not None:
                    size, crc = crc_fd(fd, entry.size + 1)  # one byte past: a longer file is told
                else:
                    size, digest = digest_fd(fd, entry.size + 1, entry.digest.algorithm)
            finally:
                os.close(fd)
        else:
            hasher = Hasher(entry.digest.algorithm)
            size = 0
            for chunk in chunks:
                view = memoryview(chunk).cast("B")
                if entry.crc32 is not None:
                    crc = crc32(view, crc)
                else:
                    hasher.update(view)
                size += view.nbytes
            digest = hasher.digest() if entry.crc32 is None else None
        same = entry.crc32 == crc if entry.crc32 is not None else digest == entry.digest
        if size != entry.size or not same:
            raise CorruptCheckpointError(
                f"The save wrote {storage.uri(path)}, which does not hold the bytes whose digest it recorded "
                f"({size} bytes read back, {entry.size} recorded): the state changed while it was written "
                "(another thread changed an array during a synchronous save: use "
                "CheckpointManager(async_save=True), which saves a snapshot, or pause that thread), or the storage "
                "returned other bytes. Nothing was committed; save again."
            )
        if checked is not None and stamp is not None:
            checked.note(stamp, entry, started, path[len(root) + 1 :])


def _check_size(storage: Storage, path: str, entry: FileEntry) -> None:
    """Refuse a local file that holds another number of bytes than ``entry`` records (one stat, no read).

    A filesystem that kept fewer bytes than it acknowledged then fails the save before its
    commit, not the next load. Remote bytes are checked from memory anyway (see check_written).
    """
    if storage.file_descriptors and (size := storage.size(path)) != entry.size:
        raise CorruptCheckpointError(
            f"The save wrote {storage.uri(path)}, which holds {size} bytes where {entry.size} were written "
            "and acknowledged: the filesystem lost some. Nothing was committed; check the filesystem "
            "(its free space, its mount) and save again."
        )


def _note_written(storage: Storage, path: str, entry: FileEntry, checked: CheckedFiles | None, root: str) -> None:
    """Remember a file this save wrote and digested as read back (see :func:`check_written`) by its stamp.

    The stamp is taken now, after the write: :meth:`CheckedFiles.note` remembers it only if
    the file's last change lies its settle time before this moment.
    """
    if checked is None or not path.startswith(root + "/"):
        return
    stamp, started = storage.stamp(path), time.time_ns()
    if stamp is not None and stamp.size == entry.size:
        checked.note(stamp, entry, started, path[len(root) + 1 :])


def _link_unchanged(
    storage: Storage,
    dst: str,
    fname: str,
    chunks: list[Chunk],
    previous: FolderReader | None,
    stats: WriteStats,
    checked: CheckedFiles | None,
    where: str,
    digest: str,
) -> FileEntry | None:
    """Link ``previous``'s file ``fname`` as ``dst`` when it holds exactly ``chunks``; its entry, else None.

    Damage never spreads (SPEC 8): a file is reused only if it holds the bytes its
    manifest records (a flipped bit linked into every later step would leave no good
    copy once retention deletes the damaged one). What is checked is the new link,
    after it is made, not the path it was made from: another writer may commit over
    the previous checkpoint between a check of the path and the link (issue 33, F5).
    """
    prev = _previous_entry(previous, fname)
    if prev is None or fname == METADATA or previous is None:
        return None
    entry = _unchanged_entry(chunks, prev, digest)
    if entry is None:
        return None
    src = previous.storage.join(previous.folder, fname)
    problem = ""
    src_stamp = None
    try:
        if storage.is_symlink(src):
            problem = "it is a symbolic link"
        else:
            # Taken before the link: CheckedFiles vouches for the file of this stamp only if the
            # link made is that very file (same identity, size and mtime; the link moves the ctime).
            src_stamp = storage.stamp(src) if checked is not None else None
            storage.link_or_copy(src, dst)
    except (OSError, CheckpointError) as err:
        problem = f"it cannot be linked ({type(err).__name__}: {err})"
    if not problem:
        problem = _link_problem(storage, dst, entry, checked, stats, src_stamp)
        if not problem:
            if checked is not None:
                checked.linked(storage.stamp(dst), f"{where}/{fname}" if where else fname)
            stats.bytes_linked += entry.size
            stats.files_linked += 1
            return entry
        with contextlib.suppress(OSError, CheckpointError):
            storage.remove(dst)  # written afresh by the caller
    if previous.changed():
        # The previous checkpoint was deleted or replaced meanwhile (another writer on the same
        # root, its retention): a race, not damage; the file is written afresh all the same.
        return None
    stats.previous_damaged = True
    _LOG.warning(
        "%s of the previous checkpoint is damaged or was replaced: %s. The new checkpoint gets a fresh copy of the "
        "file instead of a link to it. Run `cairn verify` on the previous checkpoint.",
        storage.uri(src),
        problem,
    )
    return None


_REUSE_CHECK_CHUNK = 16 << 20


def _link_problem(
    storage: Storage,
    dst: str,
    entry: FileEntry,
    checked: CheckedFiles | None,
    stats: WriteStats,
    src_stamp: FileStamp | None,
) -> str:
    """Why the file just linked (or copied) as ``dst`` may not stand for ``entry``; "" when it may.

    Read in bounded chunks (never the whole file at once), unless ``checked`` vouches
    for the file linked: the one whose stamp it recorded, as ``src_stamp`` (taken just
    before the link) shows, and ``dst`` is that very file.
    """
    stamp = None
    try:
        if storage.is_symlink(dst):
            return "it is a symbolic link"
        size = storage.size(dst)
        if size != entry.size:
            return f"it is {size} bytes but its manifest records {entry.size}"
        # The stamp is taken before the read: a write during the read changes it, so a
        # file changed after its bytes were checked is never remembered as checked.
        stamp = storage.stamp(dst) if checked is not None else None
        if (
            checked is not None
            and stamp is not None
            and src_stamp is not None
            and checked.vouch(src_stamp, entry)
            and (stamp.file_id, stamp.size, stamp.mtime_ns) == (src_stamp.file_id, src_stamp.size, src_stamp.mtime_ns)
        ):
            stats.files_vouched += 1
            return ""
        started = time.time_ns()
        hasher, off = Hasher(entry.digest.algorithm), 0
        while off < entry.size:
            chunk = storage.read_range(dst, off, min(off + _REUSE_CHECK_CHUNK, entry.size))
            if not chunk:
                break
            hasher.update(chunk)
            off += len(chunk)
        stats.bytes_reread += off
        digest = hasher.digest()
        if off != entry.size or digest != entry.digest:
            if checked is not None:
                checked.forget(stamp)
            return f"the file linked fails its checksum ({digest}, manifest says {entry.digest})"
        if checked is not None:
            checked.note(stamp, entry, started)
        return ""
    except (OSError, CheckpointError) as err:
        if checked is not None:
            checked.forget(stamp)
        return f"the file linked cannot be read ({type(err).__name__}: {err})"


def _unchanged_entry(chunks: list[Chunk], prev: FileEntry, digest: str) -> FileEntry | None:
    """The entry of ``chunks`` when they are ``prev``'s bytes (same size and ``digest``), else None.

    Only a matching digest decides; a different size rules a file out at once. A
    ``prev`` of another algorithm (an older format, or a save with another
    ``digest=``) is never matched: its file is written again, so one tree never
    mixes algorithms. A ``prev`` of format 2 carries a CRC-32 (ten times faster than
    SHA-256), which rules out a file that certainly changed before it is hashed.
    """
    views = [memoryview(c).cast("B") for c in chunks]
    if sum(len(v) for v in views) != prev.size or prev.digest.algorithm != digest:
        return None
    if prev.crc32 is not None:
        crc = 0
        for v in views:
            crc = crc32(v, crc)
        if crc != prev.crc32:
            return None
    hasher = Hasher(digest, size=prev.size)
    for v in views:
        hasher.update(v)
    entry = FileEntry(prev.size, hasher.digest(), prev.crc32)
    return entry if entry.digest == prev.digest else None


def save(
    obj: Checkpointable,
    path: str | os.PathLike[str] | None,
    *,
    state: dict[str, Any] | None,
    filesystem: Any,
    allow_pickle: bool,
    digest: str = DIGEST_ALGORITHM,
) -> str:
    """Save ``obj`` (or the given ``state``) as a checkpoint at ``path``; return the path.

    ``digest``: the checkpoint's digest (:data:`cairn.manifest.DIGEST_ALGORITHMS`).
    """
    started = time.monotonic()  # the save's one deadline counts from here (SPEC 8)
    digest = check_digest_algorithm(digest)
    if path is None:
        path = os.path.join(tempfile.gettempdir(), f"cairn-{uuid.uuid4().hex[:16]}")
    storage, final = resolve_storage(path, filesystem)
    plan = plan_checkpoint(obj, state=state, allow_pickle=allow_pickle)
    # One deadline for the whole save, its cleanup included (SPEC 8), not one per storage call.
    return commit_plan(storage.bounded(plan_bytes(plan), since=started), final, plan, digest=digest)


def plan_bytes(plan: _PlannedFolder) -> int:
    """How many bytes a plan writes (its delegated folders aside): what a save's deadline allows time for."""
    total = sum(memoryview(c).nbytes for chunks in plan.files.values() for c in chunks)
    return total + sum(plan_bytes(child) for child in plan.children.values())


def has_delegates(plan: _PlannedFolder) -> bool:
    """Whether some folder of the plan is written by a delegate."""
    return bool(_delegated_nodes(plan))


@dataclass
class StartedWrite:
    """A save whose staging place is claimed and whose delegates are writing."""

    storage: Storage
    final: str
    staging: str
    waiters: dict[str, Waiter]

    def abort(self) -> None:
        """Give the save up: wait for every delegate, then remove the staging place."""
        self.settle()
        self.storage.abort(self.staging, self.final)

    def settle(self) -> None:
        """Wait for every delegate, ignoring failures (before the staging place is removed)."""
        for waiter in self.waiters.values():
            with contextlib.suppress(BaseException):  # the failure that matters is already being raised
                waiter()


def start_write(storage: Storage, final: str, plan: _PlannedFolder, *, digest: str = DIGEST_ALGORITHM) -> StartedWrite:
    """Claim the staging place of a save at ``final`` and start the plan's delegates.

    Called before the rest is written; an async save calls it before it returns, so
    that every delegate takes its state while the caller waits.
    """
    staging = storage.begin_write(final)
    started = StartedWrite(storage, final, staging, {})
    try:
        for path, node in _delegated_nodes(plan):
            delegate = node.delegate
            if delegate is not None:  # always, for the nodes _delegated_nodes returns
                folder = DelegatedFolder(storage, storage.join(staging, *path.split("/")), staging, path, digest=digest)
                started.waiters[path] = Once(delegate.start_save(folder, allow_pickle=node.allow_pickle))
    except BaseException:
        started.abort()
        raise
    return started


def commit_plan(
    storage: Storage,
    final: str,
    plan: _PlannedFolder,
    *,
    previous: FolderReader | None = None,
    stats: WriteStats | None = None,
    started: StartedWrite | None = None,
    checked: CheckedFiles | None = None,
    digest: str = DIGEST_ALGORITHM,
) -> str:
    """Write a plan at ``final`` atomically (reusing unchanged files of ``previous``), digested with ``digest``.

    ``checked``: files of earlier checkpoints this process already read back (see
    :class:`CheckedFiles`); None reads back every file before it is linked.

    ``started``: what :func:`start_write` returned for this plan, when the caller
    started it earlier (else it is started here). Just before the root manifest,
    the storage checks that the staging place is still this save's (another
    writer on the root may have judged it abandoned and removed it): the save
    then fails instead of committing. If anything fails, every delegate is
    waited for before the staging place is removed.
    """
    if started is None:
        started = start_write(storage, final, plan, digest=digest)
    staging = started.staging
    try:
        files = _planned_files(plan)
        written: list[tuple[str, FileEntry, list[Chunk]]] = []

        def before_root_manifest() -> None:
            check_written(storage, written, checked, staging)  # a save never commits bytes failing their digest
            storage.check_owned(staging, files)

        try:
            root = write_planned(
                storage,
                staging,
                plan,
                previous=previous,
                stats=stats,
                before_manifest=before_root_manifest,
                waiters=started.waiters,
                checked=checked,
                written=written,
                digest=digest,
            )
        except CheckpointError as err:
            if isinstance(err.__cause__, FileNotFoundError):
                storage.check_owned(staging)  # a staging removed by another writer: say so
            raise
        storage.commit(staging, final)
    except BaseException:
        started.abort()
        raise
    if stats is not None:
        stats.root = root
    return storage.uri(final)


def _planned_files(plan: _PlannedFolder, prefix: str = "") -> list[str]:
    """Every file a plan writes (``/``-separated, relative to its folder), but the root manifest."""
    out = [prefix + name for name in plan.files]
    for name, child in plan.children.items():
        out += _planned_files(child, f"{prefix}{name}/")  # a delegated folder: only its manifest is known
        out.append(f"{prefix}{name}/{MANIFEST}")
    return out

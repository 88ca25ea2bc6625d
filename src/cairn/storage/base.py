"""The storage interface and the choice of backend for a path."""

from __future__ import annotations

import abc
import math
import os
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass

from cairn.errors import CheckpointError, CorruptCheckpointError
from cairn.manifest import DIGEST_ALGORITHM, RESERVED_NAMES, SIGNATURE, SIGNATURE_TEMPORARY, FileEntry

Chunk = bytes | bytearray | memoryview


DEFAULT_DEADLINE = 60.0
"""Seconds a remote storage call may take, retries included (SPEC 8), unless set otherwise."""

DEADLINE_ENV = "CAIRN_STORAGE_DEADLINE"
"""The environment variable that sets the deadline of every storage cairn builds from a path."""


def check_deadline(deadline: float | None) -> float:
    """The deadline to use: ``deadline`` when given, else ``$CAIRN_STORAGE_DEADLINE``, else 60 s.

    Raises:
        CheckpointError: For a value that is not a positive, finite number of seconds.
    """
    source = "deadline"
    value: object = deadline
    if deadline is None:
        raw = os.environ.get(DEADLINE_ENV, "").strip()
        if not raw:
            return DEFAULT_DEADLINE
        source = f"${DEADLINE_ENV}"
        try:
            value = float(raw)
        except ValueError:
            value = raw
    if isinstance(value, bool) or not isinstance(value, int | float) or not (math.isfinite(value) and value > 0):
        raise CheckpointError(
            f"The storage {source} {value!r} is not a positive number of seconds; set it to, for example, 60."
        )
    return float(value)


class FileTooLargeError(CorruptCheckpointError):
    """A file is larger than the bound its reader set (``read_file(max_bytes=...)``)."""


class ObjectChangedError(CorruptCheckpointError):
    """An object was replaced between the requests of one read (read in parts): no mix of the two is returned.

    A :class:`CorruptCheckpointError`, as the mix's failed digest check was: a checkpoint reader
    retries when the checkpoint was replaced meanwhile, and reports it otherwise.
    """


def replaceable_file(name: str) -> bool:
    """Whether a save may replace a file named ``name``: a checkpoint's file or signature, or a writer's record.

    A save replaces an existing folder only when every file in it is one of these: a
    checkpoint, or what an interrupted save left. Anything else is the user's data, and
    a save never deletes it.
    """
    from cairn.storage.writers import WRITER_FILES

    return (
        name in RESERVED_NAMES
        or name == SIGNATURE
        or SIGNATURE_TEMPORARY.fullmatch(name) is not None
        or name in WRITER_FILES
    )


def foreign_file_error(final: str, foreign: str) -> CheckpointError:
    """The refusal to replace a folder that holds files of no checkpoint."""
    return CheckpointError(
        f"Cannot save a checkpoint at {final}: the folder already holds {foreign}, which is not a file of a "
        "cairn checkpoint, and a save replaces the whole folder. Save to a new or empty folder, or delete "
        "this one first."
    )


@dataclass(frozen=True)
class FileStamp:
    """What a backend tells of a stored file without reading it (see :meth:`Storage.stamp`).

    Attributes:
        file_id: The same for every link to one file, and for no other file (a local
            disk: device and inode).
        size: Bytes.
        mtime_ns: When its bytes were last written, in ns since the epoch; every write
            through the filesystem sets it (only ``os.utime`` can put it back).
        ctime_ns: When its bytes or its inode last changed (a write, ``os.utime``, a new
            link), in ns since the epoch; nothing can put it back.
        settle_ns: How long after ``ctime_ns`` (by this process's clock) any later change
            is sure to give the file another stamp: a change within the same timestamp
            tick can keep the ctime (git's racy stamps). :data:`SETTLE_NS` unless the
            backend knows its filesystem's clock and tick (a local disk: see
            ``cairn.storage.local``).
    """

    file_id: tuple[int, ...]
    size: int
    mtime_ns: int
    ctime_ns: int
    settle_ns: int = 2_000_000_000

    def settled(self, at_ns: int) -> bool:
        """Whether a write to the file after ``at_ns`` (``time.time_ns()``) surely gives it another mtime.

        The ctime is not asked: a link (the manager's own) moves it, and a write that
        puts the mtime back with ``os.utime`` moves it again, to a later tick but for
        one made within the tick of that link (the racy case the mtime rule closes
        for plain writes, left open for a writer who also resets the mtime).
        """
        return self.mtime_ns < at_ns - self.settle_ns


SETTLE_NS = FileStamp.settle_ns
"""The settle time of a stamp whose filesystem is not known: 2 s (ticks of 1 or 2 s, clock skew on shared mounts)."""


class Storage(abc.ABC):
    """Moves bytes to and from one filesystem. Paths are absolute on that filesystem.

    The contract every backend keeps, and what the engine and the manager rely on.

    **Writing a checkpoint** (the engine, ``cairn._save.commit_plan``), always in
    this order::

        staging = storage.begin_write(final)   # claims it; refuses a file or foreign data at final
        ...write_file / makedirs / link_or_copy below staging; every component's
           manifest.json after its other files...
        storage.check_owned(staging, files)     # still this save's? (else CheckpointError)
        ...the root manifest.json, last...
        storage.commit(staging, final)          # on success
        storage.abort(staging, final)           # instead, on any failure (best effort)

    * **Several writers** on one root (SPEC 8, ``cairn.storage.writers``):
      ``begin_write`` writes an owner record (save id, host, pid) that a heartbeat
      refreshes until ``commit`` or ``abort``; ``remove_leftovers`` (a manager's
      first save; never a reader) removes another writer's staging only once that
      writer is gone (process ended, or heartbeat stale); ``check_owned`` and
      ``commit`` fail instead of committing a staging place another writer removed.

    * With ``atomic_rename`` (local disks) ``staging`` is a hidden sibling of
      ``final``; ``commit`` fsyncs the tree and renames (or atomically swaps) it
      into place. A reader sees the old checkpoint or the new one, never a mix.
    * Without it (object stores) ``begin_write`` writes the owner record
      ``.cairn-tmp-inflight`` in ``final`` first. Where ``final`` holds no
      committed checkpoint, ``staging == final``: the root ``manifest.json``,
      written last, is the commit marker, and ``commit`` deletes the record.
      Where it holds one, that one stays loadable: ``staging`` is a hidden
      sibling, and ``commit`` marks the record ``switching`` (the commit point:
      readers then read the staging folder, ``locate``), copies the new
      checkpoint into ``final`` on the server side and removes the staging
      folder. A reader treats a folder without a root manifest as absent, and
      ``locate`` refuses any folder below one that holds the record and no root
      manifest.
    * ``write_file`` returns the size and digests of exactly what was written,
      once the bytes are durable (the object store acknowledged the upload, or
      fsync) or, for a file below a staging place that the same storage object
      began, once ``commit`` made the whole tree durable before its rename (local
      disks: one sync for every file of a save instead of one per file).

    **Reading.** A reader may assume that a committed folder's files do not
    change while it reads them, except through a whole-checkpoint replacement;
    it verifies every byte against the manifests anyway. ``read_file`` and
    ``read_range`` open only regular files: a symbolic link, named pipe, socket
    or device in a checkpoint is refused with ``CorruptCheckpointError`` without
    blocking on it (SPEC 8).

    **Deleting.** ``remove_tree`` removes the commit marker (or renames the
    folder away) first, so that a crash half-way never leaves a committed
    checkpoint with missing files.

    **Time.** Every call on a remote backend gives up within :attr:`deadline`
    seconds (plus time proportional to the bytes it moves), retries included,
    and raises a ``CheckpointError`` naming the operation and the path. The
    retries live in the backend, in one loop; nothing above it retries.

    **Errors.** Write-side failures (disk full, read-only filesystem, no
    permission, an unreachable service) are ``CheckpointError``s naming the path
    and what to do; read-side ``FileNotFoundError`` / ``IsADirectoryError`` /
    ``NotADirectoryError`` pass through for the engine to phrase.

    **Capabilities** are class attributes that callers ask instead of testing
    the type of the backend.
    """

    #: True when folders can be renamed atomically (local disks): commits swap whole folders.
    atomic_rename: bool = False
    #: True when ``link_or_copy`` makes hard links (an unchanged file costs no space).
    hard_links: bool = False
    #: True when ``link_or_copy`` copies on the server side (no bytes through this process).
    server_side_copy: bool = False
    #: True when :meth:`open_regular` gives a file descriptor (streamed reads into place).
    file_descriptors: bool = False
    #: True when :meth:`write_file`'s digest is of the bytes read back from the file after they were
    #: written (not of the caller's memory): the file holds what its entry records, whatever another
    #: thread did to the arrays meanwhile, so a save need not read it back again before its commit.
    digests_written_bytes: bool = False
    #: True when a path is the same file for every process on this machine (and, for a
    #: shared mount, for every node): workers can check that a staging folder exists.
    local_paths: bool = False
    #: True when other processes (workers, Ray actors) see what this one writes (not ``memory://``).
    shared_between_processes: bool = True
    #: Seconds each remote call may take before it gives up (None: not bounded here).
    deadline: float | None = None

    def bounded(self, nbytes: int = 0, *, since: float | None = None) -> Storage:
        """A view of this storage for one whole operation (a save and its cleanup) moving about ``nbytes``.

        Every call through the view ends by one shared end, :attr:`deadline` (plus
        the time ``nbytes`` need at the backend's floor rate) after ``since`` (a
        ``time.monotonic()`` reading taken where the operation began; default now),
        instead of each call getting a deadline of its own: a save against a
        storage that stops answering fails within one deadline in total, counted
        from the start of the save (SPEC 8). Backends whose calls are not bounded
        (a local disk) return themselves.
        """
        return self

    @abc.abstractmethod
    def join(self, *parts: str) -> str:
        """Join path parts with the filesystem's separator."""

    @abc.abstractmethod
    def uri(self, path: str) -> str:
        """The string a user passes back to reach ``path`` (with protocol where remote)."""

    @abc.abstractmethod
    def write_file(self, path: str, chunks: Iterable[Chunk], *, algorithm: str = DIGEST_ALGORITHM) -> FileEntry:
        """Write ``chunks`` to ``path`` durably; return the manifest entry (size, digest) of what was written."""

    @abc.abstractmethod
    def read_file(self, path: str, *, max_bytes: int | None = None) -> bytearray:
        """Read the whole file. ``max_bytes`` bounds files whose size is not known in advance."""

    @abc.abstractmethod
    def read_range(self, path: str, start: int, end: int) -> bytes:
        """Read bytes ``[start, end)`` of a file (fewer at its end)."""

    @abc.abstractmethod
    def size(self, path: str) -> int:
        """The size of a file in bytes."""

    def stamp(self, path: str) -> FileStamp | None:
        """The file's stamp, or None when this backend cannot tell one (or it is no regular file).

        An incremental save links a file it read back and checked earlier without
        reading it again while its stamp stays the same (``cairn._save.CheckedFiles``).
        """
        return None

    @abc.abstractmethod
    def exists(self, path: str) -> bool:
        """Whether a file or folder exists at ``path``."""

    @abc.abstractmethod
    def isdir(self, path: str) -> bool:
        """Whether ``path`` is a folder."""

    @abc.abstractmethod
    def listdir(self, path: str) -> list[str]:
        """Names (not paths) of the entries of a folder; empty when it does not exist."""

    @abc.abstractmethod
    def makedirs(self, path: str) -> None:
        """Create a folder and its parents."""

    @abc.abstractmethod
    def remove(self, path: str) -> None:
        """Delete one file."""

    @abc.abstractmethod
    def remove_tree(self, path: str) -> None:
        """Delete a folder and everything in it; nothing happens if it does not exist."""

    @abc.abstractmethod
    def begin_write(self, final: str) -> str:
        """Claim the place of a checkpoint that will end up at ``final``; return where to write.

        The claim (an owner record, refreshed by a heartbeat until ``commit`` or ``abort``)
        tells other writers on the same root that this save is in flight.

        Raises:
            CheckpointError: Something that is not a checkpoint is in the way, or (object
                stores) another writer's save is in flight at ``final``.
        """

    @abc.abstractmethod
    def check_owned(self, staging: str, files: Collection[str] = ()) -> None:
        """Check that the save at ``staging`` is still this writer's, just before its root manifest.

        Args:
            staging: What ``begin_write`` returned.
            files: Paths relative to ``staging`` (``/``-separated) that the save wrote; where
                writes are not atomic (object stores) each must still be there.

        Raises:
            CheckpointError: Another writer removed the staging place (it judged the save
                abandoned); nothing may be committed.
        """

    @abc.abstractmethod
    def commit(self, staging: str, final: str) -> None:
        """Make the checkpoint written at ``staging`` visible at ``final``, atomically.

        Raises:
            CheckpointError: The staging place is no longer this writer's; nothing is committed.
        """

    @abc.abstractmethod
    def abort(self, staging: str, final: str) -> None:
        """Remove what a failed write left at ``staging`` (never another writer's files)."""

    @abc.abstractmethod
    def remove_leftovers(self, root: str, is_target: Callable[[str], bool]) -> list[str]:
        """Remove what interrupted saves and deletes left directly under ``root``; return the names.

        Only leftovers of folders whose name passes ``is_target`` (a manager's step
        folders) are considered, and a save in flight is removed only once its writer is
        gone (see ``cairn.storage.writers``). Called by writers, never by readers.
        """

    def check_committed(self, path: str) -> None:  # noqa: B027 - a no-op unless a backend overrides it
        """Raise ``CheckpointNotFoundError`` if ``path`` lies inside a save that has not committed.

        A no-op where folders are renamed into place atomically (nothing uncommitted is
        ever visible under a checkpoint's name).
        """

    def locate(self, path: str) -> str:
        """The folder a reader of the checkpoint named ``path`` reads: ``path`` itself, except on an
        object store while a save over it switches its new checkpoint into place (then the staging
        folder that holds it, whole). Raises like :meth:`check_committed`.
        """
        self.check_committed(path)
        return path

    def locator(self, root: str) -> Callable[[str], str]:
        """:meth:`locate` for the paths of one listing under ``root`` (a manager's steps).

        A backend whose :meth:`locate` reads every folder above a path reads those of
        ``root`` and above once for all of them (``FsspecStorage``); here, :meth:`locate`.
        """
        return self.locate

    @abc.abstractmethod
    def link_or_copy(self, src: str, dst: str) -> None:
        """Make ``dst`` a file with the content of ``src`` without sending the bytes again."""

    def is_symlink(self, path: str) -> bool:
        """Whether ``path`` is a symbolic link (only local disks have them)."""
        return False

    def open_regular(self, path: str) -> int:
        """Open a regular file of a checkpoint for reading; return the file descriptor.

        Only backends with :attr:`file_descriptors` have it. Links, pipes, sockets
        and devices are refused with ``CorruptCheckpointError`` before anything
        blocks on them.
        """
        raise CheckpointError(f"{self.uri(path)} cannot be opened as a local file: {type(self).__name__} has none.")

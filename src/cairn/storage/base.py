"""The storage interface and the choice of backend for a path."""

from __future__ import annotations

import abc
import os
from collections.abc import Callable, Collection, Iterable
from typing import Any

from cairn.errors import CheckpointError, CorruptCheckpointError

Chunk = bytes | bytearray | memoryview


class FileTooLargeError(CorruptCheckpointError):
    """A file is larger than the bound its reader set (``read_file(max_bytes=...)``)."""


CHECKPOINT_FILES = frozenset({"manifest.json", "metadata.json", "ctor.json", "state.msgpack", "tensors.safetensors"})
"""The names of the files a checkpoint folder holds (``cairn.manifest.RESERVED_NAMES``).

A save replaces an existing folder only when every file in it has one of these
names: a checkpoint, or what an interrupted save left. Anything else is the
user's data, and a save never deletes it.
"""


def replaceable_file(name: str) -> bool:
    """Whether a save may replace a file named ``name``: a checkpoint's file, or a writer's record."""
    from cairn.storage.writers import WRITER_FILES

    return name in CHECKPOINT_FILES or name in WRITER_FILES


def foreign_file_error(final: str, foreign: str) -> CheckpointError:
    """The refusal to replace a folder that holds files of no checkpoint."""
    return CheckpointError(
        f"Cannot save a checkpoint at {final}: the folder already holds {foreign}, which is not a file of a "
        "cairn checkpoint, and a save replaces the whole folder. Save to a new or empty folder, or delete "
        "this one first."
    )


class Storage(abc.ABC):
    """Moves bytes to and from one filesystem. Paths are absolute on that filesystem."""

    #: True when folders can be renamed atomically (local disks).
    atomic_rename: bool = False

    @abc.abstractmethod
    def join(self, *parts: str) -> str:
        """Join path parts with the filesystem's separator."""

    @abc.abstractmethod
    def uri(self, path: str) -> str:
        """The string a user passes back to reach ``path`` (with protocol where remote)."""

    @abc.abstractmethod
    def write_file(self, path: str, chunks: Iterable[Chunk]) -> tuple[int, int]:
        """Write ``chunks`` to ``path`` durably; return (size, crc32) of what was written."""

    @abc.abstractmethod
    def read_file(self, path: str, *, max_bytes: int | None = None) -> bytearray:
        """Read the whole file. ``max_bytes`` bounds files whose size is not known in advance."""

    @abc.abstractmethod
    def read_range(self, path: str, start: int, end: int) -> bytes:
        """Read bytes ``[start, end)`` of a file (fewer at its end)."""

    @abc.abstractmethod
    def size(self, path: str) -> int:
        """The size of a file in bytes."""

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

    # A save: ``staging = begin_write(final)``; every file under ``staging``, each folder's
    # manifest after its files, bottom-up; ``check_owned(staging, files)`` just before the root
    # manifest; the root manifest; ``commit(staging, final)``. On any failure: ``abort``.
    # Writers on one root coordinate through owner records and heartbeats (storage/writers.py).

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

    @abc.abstractmethod
    def link_or_copy(self, src: str, dst: str) -> None:
        """Make ``dst`` a file with the content of ``src`` without sending the bytes again."""

    def is_symlink(self, path: str) -> bool:
        """Whether ``path`` is a symbolic link (only local disks have them)."""
        return False


# Protocols with a cairn extra (pyproject.toml), and the fsspec backends of the others.
_EXTRAS = {"s3": "s3", "s3a": "s3"}
_PACKAGES = {
    "gs": "gcsfs",
    "gcs": "gcsfs",
    "abfs": "adlfs",
    "az": "adlfs",
    "adl": "adlfs",
    "hdfs": "pyarrow",
    "sftp": "paramiko",
    "ssh": "paramiko",
    "http": "aiohttp",
    "https": "aiohttp",
    "oci": "ocifs",
    "webdav": "webdav4",
}


def _is_local_fs(fs: Any) -> bool:
    from fsspec.implementations.local import LocalFileSystem

    return isinstance(fs, LocalFileSystem)


def resolve_storage(path: str | os.PathLike[str] | None, filesystem: Any = None) -> tuple[Storage, str]:
    """Return the storage for ``path`` and the path as that storage names it.

    Args:
        path: A local path, a ``file://`` URI, any fsspec URI (``memory://``,
            ``s3://``, ...), or a path on ``filesystem``.
        filesystem: An fsspec filesystem; when given, ``path`` is a path on it.

    Raises:
        CheckpointError: For an unknown protocol, or a missing extra (named).
    """
    from cairn.storage.fsspec_storage import FsspecStorage
    from cairn.storage.local import LocalStorage

    if path is None:
        raise CheckpointError("A checkpoint path is required.")
    p = os.fspath(path)
    if filesystem is not None:
        if _is_local_fs(filesystem):
            return LocalStorage(), os.path.abspath(p.removeprefix("file://"))
        return FsspecStorage(filesystem), filesystem._strip_protocol(p)
    if "://" not in p:
        return LocalStorage(), os.path.abspath(p)
    if p.startswith("file://"):
        return LocalStorage(), os.path.abspath(p[len("file://") :])
    import fsspec

    protocol = p.split("://", 1)[0]
    try:
        fs, stripped = fsspec.core.url_to_fs(p)
    except ImportError as err:
        extra = _EXTRAS.get(protocol)
        package = _PACKAGES.get(protocol)
        if extra:
            hint = f"pip install 'cairn-rl[{extra}]'"
        elif package:
            hint = f"pip install {package}"
        else:
            hint = f"install the fsspec backend for {protocol}://"
        raise CheckpointError(
            f"Cannot open {p!r}: the {protocol}:// backend is not installed ({err}). Run: {hint}."
        ) from err
    except ValueError as err:
        raise CheckpointError(f"Cannot open {p!r}: unknown storage protocol {protocol!r} ({err}).") from err
    if _is_local_fs(fs):
        return LocalStorage(), os.path.abspath(stripped)
    return FsspecStorage(fs), stripped

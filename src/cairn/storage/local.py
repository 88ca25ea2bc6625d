"""Local disk storage: write to a hidden sibling folder, fsync, rename into place."""

from __future__ import annotations

import ctypes
import errno
import os
import shutil
import uuid
from collections.abc import Iterable
from concurrent.futures import Future
from stat import S_IFBLK, S_IFCHR, S_IFIFO, S_IFLNK, S_IFMT, S_IFSOCK, S_ISDIR, S_ISREG

from cairn._crc import crc32, crc_pool
from cairn.errors import CheckpointError, CorruptCheckpointError
from cairn.storage.base import CHECKPOINT_FILES, Chunk, FileTooLargeError, Storage, foreign_file_error

_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def _load_renameat2() -> object | None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    fn.restype = ctypes.c_int
    return fn


_renameat2 = _load_renameat2()

_SLICE = 32 << 20  # CRC and write granularity
_INLINE_CRC = 1 << 20  # below this the helper thread costs more than it saves
_WRITEBACK = 64 << 20  # start the device write-back after this many new bytes
_SYNC_FILE_RANGE_WRITE = 2


def _load_sync_file_range() -> object | None:
    try:
        fn = ctypes.CDLL(None, use_errno=True).sync_file_range
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    fn.restype = ctypes.c_int
    return fn


_sync_file_range = _load_sync_file_range()
TMP_MARK = ".cairn-tmp-"


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _first_foreign_file(folder: str) -> str | None:
    """The first file under ``folder`` that no checkpoint holds (links count), or None."""
    for root, dirs, files in os.walk(folder):
        for name in sorted(files):
            if name not in CHECKPOINT_FILES or os.path.islink(os.path.join(root, name)):
                return os.path.join(root, name)
        for name in sorted(dirs):
            if os.path.islink(os.path.join(root, name)):
                return os.path.join(root, name)
    return None


def _write_error(what: str, path: str, err: OSError) -> CheckpointError:
    """A failed write (disk full, permissions, ...) as the documented error, naming the path."""
    return _system_error(what, path, err, intact=True)


_WHAT_TO_DO = {
    errno.EROFS: "the filesystem is read-only: remount it read-write or save to another path",
    errno.ENOSPC: "the disk is full: free some space or save to another disk",
    errno.EDQUOT: "the disk quota is used up: free some space or save elsewhere",
    errno.EACCES: "no permission: check the owner and the mode of the folder",
    errno.EPERM: (
        "the operation is not permitted: check the permissions, and whether the file or folder is "
        "immutable (lsattr; chattr -i)"
    ),
}


def _system_error(what: str, path: str, err: OSError, *, intact: bool) -> CheckpointError:
    """A failed write-side call (disk full, read-only, permissions, ...) as the documented error.

    Names the path and the system's reason, and says what to do; ``intact`` says
    that the call could not have touched a previous checkpoint (writes go to a
    staging folder; a failed commit rename leaves the old folder in place).
    """
    reason = err.strerror or str(err)
    todo = _WHAT_TO_DO.get(err.errno or -1, "check the free space and the permissions of the folder")
    tail = " Any previous checkpoint there is intact." if intact else ""
    return CheckpointError(f"{what} {path} failed: {reason} (errno {err.errno}). To fix: {todo}.{tail}")


_KINDS = {
    S_IFIFO: "a named pipe",
    S_IFSOCK: "a socket",
    S_IFCHR: "a character device",
    S_IFBLK: "a block device",
    S_IFLNK: "a symbolic link",
}


def _not_regular(path: str, mode: int) -> OSError | CorruptCheckpointError:
    """The refusal of a file that is not a regular file (a folder stays an ``IsADirectoryError``)."""
    if S_ISDIR(mode):
        return IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), path)
    kind = _KINDS.get(S_IFMT(mode), "not a file")
    return CorruptCheckpointError(
        f"{path} is {kind}, not a regular file: a checkpoint holds only regular files; someone replaced it. "
        "cairn does not open it (it could block or lead outside the checkpoint). Delete it and restore "
        "the file from a good copy of the checkpoint."
    )


_OPEN_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_OPEN_FILE = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC


def open_regular(path: str) -> int:
    """Open a regular file for reading, refusing everything else without blocking on it.

    The one opener of every local read (SPEC 8). The folder holding the file is
    opened first without following a link, and the file is looked up inside it
    (``dir_fd``): a folder swapped for a link cannot redirect the read. The entry
    is checked with ``lstat`` before it is opened (opening some devices has side
    effects), then opened with ``O_NONBLOCK | O_NOFOLLOW`` (a pipe swapped in
    between does not block the open) and checked again with ``fstat`` on what was
    opened; only then is the descriptor made blocking.

    Raises:
        CorruptCheckpointError: For a link, named pipe, socket or device.
        FileNotFoundError, IsADirectoryError, NotADirectoryError: As ``open``.
    """
    parent, name = os.path.split(path)
    try:
        dir_fd = os.open(parent or ".", _OPEN_DIR)
    except OSError as err:
        # O_DIRECTORY | O_NOFOLLOW on a link gives ENOTDIR (ELOOP on some kernels).
        if err.errno in (errno.ELOOP, errno.ENOTDIR) and os.path.islink(parent):
            raise CorruptCheckpointError(
                f"{parent} is a symbolic link; cairn never follows links inside a checkpoint "
                "(one could point outside it). Replace it with the real folder."
            ) from err
        raise
    try:
        mode = os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode
        if not S_ISREG(mode):
            raise _not_regular(path, mode)
        try:
            fd = os.open(name, _OPEN_FILE, dir_fd=dir_fd)
        except OSError as err:
            if err.errno in (errno.ELOOP, errno.ENXIO, errno.ENODEV):  # swapped since the lstat
                raise _not_regular(path, os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode) from err
            raise
    finally:
        os.close(dir_fd)
    try:
        mode = os.fstat(fd).st_mode
        if not S_ISREG(mode):
            raise _not_regular(path, mode)
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


class LocalStorage(Storage):
    """A local filesystem, with atomic commits by rename.

    Local calls are not bounded by :attr:`deadline` (it is kept for callers that
    ask): a local disk answers or the kernel reports an error.
    """

    atomic_rename = True
    hard_links = True
    file_descriptors = True
    local_paths = True

    def __init__(self, *, deadline: float | None = None) -> None:
        """A local disk; ``deadline`` is recorded, not enforced (see the class docstring)."""
        self.deadline = deadline

    def join(self, *parts: str) -> str:
        """Join with ``os.path.join``."""
        return os.path.join(*parts)

    def uri(self, path: str) -> str:
        """Local paths are returned as plain paths."""
        return path

    def write_file(self, path: str, chunks: Iterable[Chunk]) -> tuple[int, int]:
        """Write, checksum as the bytes go out, and fsync."""
        try:
            return self._write_file(path, chunks)
        except OSError as err:
            raise _write_error("Writing", path, err) from err

    def _write_file(self, path: str, chunks: Iterable[Chunk]) -> tuple[int, int]:
        # The CRC of each slice runs in a helper thread while the slice is written (both
        # release the GIL), and the kernel is asked to start write-back every few slices so
        # that the final fsync only waits for the tail: together close to raw disk speed.
        crc = [0]
        size = 0
        flushed = 0

        def crc_of(mv: memoryview) -> None:
            crc[0] = crc32(mv, crc[0])

        pool = crc_pool()
        pending: list[Future[None]] = []
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
        try:
            for chunk in chunks:
                whole = memoryview(chunk).cast("B")
                for start in range(0, len(whole), _SLICE):
                    mv = whole[start : start + _SLICE]
                    if len(mv) < _INLINE_CRC:
                        for f in pending:
                            f.result()
                        pending.clear()
                        crc_of(mv)
                    else:
                        pending.append(pool.submit(crc_of, mv))
                    while mv:
                        n = os.write(fd, mv)
                        mv = mv[n:]
                        size += n
                    if _sync_file_range is not None and size - flushed >= _WRITEBACK:
                        _sync_file_range(fd, flushed, size - flushed, _SYNC_FILE_RANGE_WRITE)  # type: ignore[operator]
                        flushed = size
            for f in pending:
                f.result()
            os.fsync(fd)
        finally:
            for f in pending:
                f.result()
            os.close(fd)
        return size, crc[0]

    def open_regular(self, path: str) -> int:
        """Open a regular file for reading (links, pipes, sockets, devices refused); see :func:`open_regular`."""
        return open_regular(path)

    def read_file(self, path: str, *, max_bytes: int | None = None) -> bytearray:
        """Read a whole file into one buffer (no intermediate copies)."""
        fd = open_regular(path)
        try:
            size = os.fstat(fd).st_size
            if max_bytes is not None and size > max_bytes:
                raise FileTooLargeError(
                    f"{path} is {size} bytes, over the limit of {max_bytes} for this kind of file; "
                    "it is corrupt or hostile."
                )
            buf = bytearray(size)
            view = memoryview(buf)
            got = 0
            while got < size:
                n = os.readv(fd, [view[got:]])
                if n == 0:
                    break
                got += n
            return buf if got == size else buf[:got]
        finally:
            os.close(fd)

    def read_range(self, path: str, start: int, end: int) -> bytes:
        """``os.pread`` of a byte range."""
        fd = open_regular(path)
        try:
            return os.pread(fd, max(0, end - start), start)
        finally:
            os.close(fd)

    def size(self, path: str) -> int:
        """``os.stat`` size, links not followed."""
        return os.lstat(path).st_size

    def exists(self, path: str) -> bool:
        """``os.path.lexists``."""
        return os.path.lexists(path)

    def isdir(self, path: str) -> bool:
        """A real folder, not a link to one."""
        return os.path.isdir(path) and not os.path.islink(path)

    def is_symlink(self, path: str) -> bool:
        """``os.path.islink``."""
        return os.path.islink(path)

    def listdir(self, path: str) -> list[str]:
        """Sorted entry names; empty when the folder is missing."""
        try:
            return sorted(os.listdir(path))
        except (FileNotFoundError, NotADirectoryError):
            return []

    def makedirs(self, path: str) -> None:
        """``os.makedirs(exist_ok=True)``."""
        try:
            os.makedirs(path, exist_ok=True)
        except OSError as err:
            raise _write_error("Creating the folder", path, err) from err

    def remove(self, path: str) -> None:
        """Delete a file."""
        try:
            os.unlink(path)
        except FileNotFoundError:
            raise
        except OSError as err:
            raise _system_error("Deleting", path, err, intact=False) from err

    def remove_tree(self, path: str) -> None:
        """Delete a tree; missing is fine.

        A folder is first renamed to a hidden name (atomically, and durably), then
        deleted: a crash half-way through the deletion leaves a hidden leftover, never a
        checkpoint that still has its manifest but lacks some of its files.
        """
        try:
            self._remove_tree(path)
        except FileNotFoundError as err:
            if not os.path.lexists(path):
                return  # deleted meanwhile by someone else: what was asked for
            raise _system_error("Deleting", path, err, intact=False) from err
        except OSError as err:
            raise _system_error("Deleting", path, err, intact=False) from err

    def _remove_tree(self, path: str) -> None:
        if os.path.islink(path) or os.path.isfile(path):
            os.unlink(path)
        elif os.path.isdir(path):
            parent, name = os.path.split(path.rstrip(os.sep))
            doomed = os.path.join(parent, f".{name}{TMP_MARK}{uuid.uuid4().hex[:12]}-deleting")
            try:
                os.rename(path, doomed)
                _fsync_dir(parent)
            except OSError:
                doomed = path  # e.g. no write permission on the parent: delete in place
            shutil.rmtree(doomed, ignore_errors=False)

    def begin_write(self, final: str) -> str:
        """A fresh hidden sibling of ``final`` on the same filesystem, so rename is atomic."""
        parent, name = os.path.split(final.rstrip(os.sep))
        if not name:
            raise CheckpointError(f"Cannot save a checkpoint at {final!r}: it names no folder.")
        if os.path.lexists(final) and (os.path.islink(final) or not os.path.isdir(final)):
            raise CheckpointError(f"Cannot save a checkpoint at {final!r}: a file or link is in the way.")
        if os.path.isdir(final):
            foreign = _first_foreign_file(final)
            if foreign is not None:
                raise foreign_file_error(final, foreign)
        staging = os.path.join(parent, f".{name}{TMP_MARK}{uuid.uuid4().hex[:12]}")
        try:
            os.makedirs(parent, exist_ok=True)
            os.makedirs(staging)
        except OSError as err:
            raise _write_error("Creating the folder", staging, err) from err
        return staging

    def commit(self, staging: str, final: str) -> None:
        """fsync every folder of the tree, then rename (or swap) it into place."""
        try:
            self._commit(staging, final)
        except OSError as err:
            raise _write_error("Committing the checkpoint", final, err) from err

    def _commit(self, staging: str, final: str) -> None:
        for root, _dirs, _files in os.walk(staging, topdown=False):
            _fsync_dir(root)
        parent = os.path.dirname(final.rstrip(os.sep))
        if os.path.isdir(final):
            # Swap atomically so readers never see a moment without a checkpoint, and a
            # crash leaves either the old or the new one in place, never neither.
            if _renameat2 is not None:
                rc = _renameat2(
                    _AT_FDCWD,
                    os.fsencode(staging),
                    _AT_FDCWD,
                    os.fsencode(final),  # type: ignore[operator]
                    _RENAME_EXCHANGE,
                )
                if rc == 0:
                    _fsync_dir(parent)
                    shutil.rmtree(staging, ignore_errors=True)  # now holds the old checkpoint
                    return
            old = f"{staging}-old"
            os.rename(final, old)
            os.rename(staging, final)
            _fsync_dir(parent)
            shutil.rmtree(old, ignore_errors=True)
            return
        os.rename(staging, final)
        _fsync_dir(parent)

    def abort(self, staging: str, final: str) -> None:
        """Remove the staging folder; ``final`` was never touched."""
        shutil.rmtree(staging, ignore_errors=True)

    def link_or_copy(self, src: str, dst: str) -> None:
        """A hard link when possible (same filesystem), else a copy."""
        try:
            os.link(src, dst, follow_symlinks=False)
        except OSError:
            try:
                shutil.copyfile(src, dst, follow_symlinks=False)
            except OSError as err:
                raise _write_error("Copying", f"{src} to {dst}", err) from err

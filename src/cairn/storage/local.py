"""Local disk storage: write to a hidden sibling folder, fsync, rename into place."""

from __future__ import annotations

import collections
import contextlib
import ctypes
import errno
import os
import shutil
import stat
import threading
import time
from collections.abc import Callable, Collection, Iterable
from concurrent.futures import Future
from stat import S_IFBLK, S_IFCHR, S_IFIFO, S_IFLNK, S_IFMT, S_IFSOCK, S_ISDIR, S_ISREG
from typing import Any

from cairn._crc import hash_pool
from cairn.errors import CheckpointError, CorruptCheckpointError
from cairn.manifest import DIGEST_ALGORITHM, MANIFEST, FileEntry, Hasher
from cairn.storage import writers
from cairn.storage.base import (
    SETTLE_NS,
    Chunk,
    FileStamp,
    FileTooLargeError,
    Storage,
    foreign_file_error,
    replaceable_file,
)
from cairn.storage.writers import TMP_MARK

__all__ = ["TMP_MARK", "LocalStorage"]

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

_SLICE = 32 << 20  # hashing and write granularity
_INLINE_HASH = 1 << 20  # below this the helper thread costs more than it saves
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

# Filesystems whose timestamps this kernel sets from its own clock, the one time.time_ns() reads
# (an allow-list: a network or FUSE filesystem takes the server's clock, skewed from ours).
_LOCAL_CLOCK_FS = frozenset({"ext4", "xfs", "btrfs", "tmpfs", "f2fs", "overlay"})
_CLOCK_REALTIME_COARSE = 5  # Linux's clock id: what the kernel stamps files with (one tick per jiffy)
_local_clock_devs: dict[int, bool] = {}


def _local_clock(dev: int) -> bool:
    """Whether files on device ``dev`` get timestamps from this kernel's clock (/proc/self/mountinfo)."""
    known = _local_clock_devs.get(dev)
    if known is not None:
        return known
    key = f"{os.major(dev)}:{os.minor(dev)}"
    local = False
    try:
        with open("/proc/self/mountinfo", encoding="utf-8") as f:
            for line in f:
                fields = line.split()
                # id parent major:minor root mountpoint options [optional...] - fstype source superoptions
                if len(fields) > 3 and fields[2] == key and "-" in fields:
                    fstype = fields[fields.index("-") + 1] if fields.index("-") + 1 < len(fields) else ""
                    local = fstype in _LOCAL_CLOCK_FS
                    break
    except OSError:
        local = False
    _local_clock_devs[dev] = local
    return local


def _settle_ns(st: os.stat_result) -> int:
    """How long after its ctime a change to this file surely changes its stamp (:class:`FileStamp`'s ``settle_ns``).

    A local filesystem of sub-millisecond timestamps is stamped from this kernel's
    coarse clock, which lags ``time.time_ns()`` by at most one tick: a change made a
    tick after the ctime gets another ctime. Four ticks (at least 10 ms) leave room.
    Anything else (timestamps of whole seconds, a filesystem not allow-listed, no
    coarse clock) keeps the cautious default.
    """
    if st.st_ctime_ns % 1_000_000 == 0 or not _local_clock(st.st_dev):
        return SETTLE_NS
    try:
        tick = time.clock_getres(_CLOCK_REALTIME_COARSE)
    except OSError:
        return SETTLE_NS
    return max(int(4 * tick * 1e9), 10_000_000)


def _load_syncfs() -> object | None:
    """``syncfs(2)`` where it reports write-back errors (Linux 5.8 and later), else None."""
    try:
        release = tuple(int(x) for x in os.uname().release.split("-")[0].split(".")[:2])
        if release < (5, 8):
            return None  # older kernels' syncfs returns 0 even when a write-back failed
        fn = ctypes.CDLL(None, use_errno=True).syncfs
    except (OSError, AttributeError, ValueError):
        return None
    fn.argtypes = [ctypes.c_int]
    fn.restype = ctypes.c_int
    return fn


_syncfs = _load_syncfs()
_IOV_MAX = 512  # buffers per writev (the system's limit is at least 1024)


def _sync_tree(folder: str) -> None:
    """Make every file and folder entry under ``folder`` durable.

    One ``syncfs`` of the filesystem where the kernel has a trustworthy one: it
    writes back and waits for everything the save wrote (and anything else dirty
    on that filesystem) in one journal commit, instead of one commit per file and
    folder. Elsewhere, ``fsync`` of every file, then of every folder bottom-up.
    """
    if _syncfs is not None:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
        try:
            if _syncfs(fd) != 0:  # type: ignore[operator]
                err = ctypes.get_errno()
                raise OSError(err, os.strerror(err), folder)
        finally:
            os.close(fd)
        return
    for root, _dirs, files in os.walk(folder, topdown=False):
        for name in files:
            fd = os.open(os.path.join(root, name), os.O_RDONLY | os.O_NOFOLLOW)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        _fsync_dir(root)


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_small(path: str, views: list[memoryview], algorithm: str) -> FileEntry:
    """Write a small file of a staging folder: one ``writev``, then its bytes read back and hashed inline.

    Most files of an RL checkpoint are a few kB: the helper thread, the queue and the
    early ``sync_file_range`` of large files cost more than their bytes here, and the
    commit's one sync writes them back together (see ``_sync_tree``).
    """
    total = sum(len(v) for v in views)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
    try:
        done = os.writev(fd, views) if views else 0
        if done < total:  # a short write (a signal, a full disk reports itself next): the rest, in order
            rest = memoryview(b"".join(views))[done:]
            while rest:
                n = os.write(fd, rest)
                rest = rest[n:]
        hasher = Hasher(algorithm, with_crc=True, size=total)
        _hash_back(fd, 0, total, hasher)
    finally:
        os.close(fd)
    return hasher.entry(total)


_HASH_BACK = 4 << 20  # read back in pieces that stay in the cache (L3) until they are hashed
_hash_local = threading.local()


def _hash_back(fd: int, start: int, end: int, hasher: Hasher) -> None:
    """Feed ``hasher`` the bytes ``[start, end)`` of the open file ``fd``, as the file holds them now.

    Just written, they come from the page cache: a copy into a reused buffer of this
    thread, hashed while it is in the cache. What is hashed is what the file holds,
    not what the caller's arrays held when the write read them.
    """
    buf: memoryview | None = getattr(_hash_local, "buf", None)
    if buf is None:
        buf = _hash_local.buf = memoryview(bytearray(_HASH_BACK))
    off = start
    while off < end:
        n = os.preadv(fd, [buf[: min(_HASH_BACK, end - off)]], off)
        if n == 0:
            raise OSError(errno.EIO, f"{end - off} bytes just written are missing from the file")
        hasher.update(buf[:n])
        off += n


def _first_foreign_file(folder: str) -> str | None:
    """The first file under ``folder`` that no checkpoint holds (links count), or None."""
    for root, dirs, files in os.walk(folder):
        for name in sorted(files):
            if not replaceable_file(name) or os.path.islink(os.path.join(root, name)):
                return os.path.join(root, name)
        for name in sorted(dirs):
            if os.path.islink(os.path.join(root, name)):
                return os.path.join(root, name)
    return None


def _write_record(path: str, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def _read_record(path: str) -> tuple[bytes | None, float | None]:
    """An owner record's bytes and mtime; (None, None) when missing, never blocking on a FIFO."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None, None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return b"", st.st_mtime
        return os.read(fd, writers.MAX_RECORD_BYTES + 1), st.st_mtime
    except OSError:
        return b"", None
    finally:
        os.close(fd)


def _touch(record: str) -> bool:
    """A heartbeat: refresh the record's mtime; False once it is gone (another writer removed it)."""
    try:
        os.utime(record, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return True


def _rmtree(path: str) -> None:
    """``shutil.rmtree`` that tolerates another process deleting the same tree at the same time.

    Any other failure (permissions, a read-only filesystem) is raised as the ``OSError``
    it is, for ``remove_tree`` to phrase.
    """
    shutil.rmtree(path, ignore_errors=True)
    if os.path.lexists(path):  # something could not be deleted: find out what
        with contextlib.suppress(FileNotFoundError):
            shutil.rmtree(path)


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
    digests_written_bytes = True
    local_paths = True

    def __init__(self, *, deadline: float | None = None) -> None:
        """A local disk; ``deadline`` is recorded, not enforced (see the class docstring)."""
        self.deadline = deadline
        self._lock = threading.Lock()
        self._stagings: set[str] = set()  # begun here, not yet committed or aborted: synced by commit

    def __getstate__(self) -> dict[str, Any]:
        """Pickled (sent to an actor) without this process's saves in flight: the copy fsyncs what it writes."""
        return {"deadline": self.deadline}

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Rebuilt in another process: no save in flight there yet."""
        self.__init__(deadline=state.get("deadline"))  # type: ignore[misc]

    def join(self, *parts: str) -> str:
        """Join with ``os.path.join``."""
        return os.path.join(*parts)

    def uri(self, path: str) -> str:
        """Local paths are returned as plain paths."""
        return path

    def write_file(self, path: str, chunks: Iterable[Chunk], *, algorithm: str = DIGEST_ALGORITHM) -> FileEntry:
        """Write, checksum as the bytes go out, and make durable.

        Below a staging folder this object's ``begin_write`` made, durability is
        the commit's (one sync of the whole tree before its rename); any other
        file is fsynced here.
        """
        try:
            return self._write_file(path, chunks, algorithm)
        except OSError as err:
            raise _write_error("Writing", path, err) from err

    def _synced_by_commit(self, path: str) -> bool:
        with self._lock:
            return any(path.startswith(s + os.sep) for s in self._stagings)

    def _write_file(self, path: str, chunks: Iterable[Chunk], algorithm: str) -> FileEntry:
        # Each byte is hashed as the file holds it: every batch written is read back (from the page
        # cache) and hashed by the helper thread while the next batches are written (both release
        # the GIL), so the digest is of the bytes written even if another thread changes an array
        # meanwhile, and the save needs no pass of its own to check that (cairn._save.check_written).
        # The kernel is asked to start write-back every few slices so that the final sync only waits
        # for the tail: together close to raw disk speed. Small slices (most tensors of an RL
        # checkpoint) are written together with one writev: a system call per tensor costs more
        # than its bytes.
        sync = not self._synced_by_commit(path)
        if not sync and isinstance(chunks, list | tuple):
            views = [memoryview(c).cast("B") for c in chunks]
            if sum(len(v) for v in views) < _INLINE_HASH and len(views) < _IOV_MAX:
                return _write_small(path, views, algorithm)
        # The CRC-32 of the same bytes the digest sees (ISA-L, ~10x the digest's speed), kept in the
        # entry for format 2's manifests and for storages that check by it.
        hasher = Hasher(algorithm, with_crc=True)
        size = 0
        flushed = 0

        pool = hash_pool()
        pending: collections.deque[Future[None]] = collections.deque()
        batch: list[memoryview] = []
        batched = 0
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)

        def write_all(views: list[memoryview]) -> int:
            total = sum(len(v) for v in views)
            done = 0
            while views:
                n = os.writev(fd, views)
                done += n
                while views and n >= len(views[0]):  # drop what was written; a short write resumes
                    n -= len(views[0])
                    views = views[1:]
                if views and n:
                    views = [views[0][n:], *views[1:]]
            return total if done == total else done

        def hash_back(start: int, end: int) -> None:
            while pending and pending[0].done():
                pending.popleft().result()
            if end - start < _INLINE_HASH and not pending:
                _hash_back(fd, start, end, hasher)  # small: the helper thread costs more than it saves
            else:  # in file order behind the others; this thread never waits for them here
                pending.append(pool.submit(_hash_back, fd, start, end, hasher))

        try:
            for chunk in chunks:
                whole = memoryview(chunk).cast("B")
                for start in range(0, len(whole), _SLICE):
                    mv = whole[start : start + _SLICE]
                    batch.append(mv)
                    batched += len(mv)
                    if len(mv) < _INLINE_HASH and len(batch) < _IOV_MAX and batched < _INLINE_HASH:
                        continue
                    begin = size
                    size += write_all(batch)
                    hash_back(begin, size)
                    batch, batched = [], 0
                    if _sync_file_range is not None and size - flushed >= _WRITEBACK:
                        _sync_file_range(fd, flushed, size - flushed, _SYNC_FILE_RANGE_WRITE)  # type: ignore[operator]
                        flushed = size
            if batch:
                begin = size
                size += write_all(batch)
                hash_back(begin, size)
            for f in pending:
                f.result()
            if sync:
                os.fsync(fd)
            elif _sync_file_range is not None and size > flushed:
                # Start the write-back now: the commit's sync then mostly finds it done.
                _sync_file_range(fd, flushed, size - flushed, _SYNC_FILE_RANGE_WRITE)  # type: ignore[operator]
        finally:
            for f in pending:  # the fd is read by them: closed only once they are done
                with contextlib.suppress(BaseException):
                    f.result()
            os.close(fd)
        return hasher.entry(size)

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

    def stamp(self, path: str) -> FileStamp | None:
        """Device, inode, size, mtime and ctime of a regular file (links not followed); None for anything else."""
        st = os.lstat(path)
        if not stat.S_ISREG(st.st_mode):
            return None
        return FileStamp((st.st_dev, st.st_ino), st.st_size, st.st_mtime_ns, st.st_ctime_ns, _settle_ns(st))

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
        """Delete a tree; missing is fine, and so is another writer deleting it at the same time.

        A folder is first renamed to a hidden ``-deleting`` name (atomically, and durably),
        then deleted: a crash half-way through the deletion leaves a hidden leftover (which
        the next save of a manager removes), never a checkpoint that still has its manifest
        but lacks some of its files.
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
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
            return
        if not os.path.isdir(path):
            return
        parent, name = os.path.split(path.rstrip(os.sep))
        parsed = writers.parse_tmp_name(name)
        doomed = path
        if parsed is None or parsed.suffix != writers.DELETING_SUFFIX:
            target = parsed.target if parsed is not None else name
            doomed = os.path.join(parent, writers.tmp_name(target, writers.new_write_id(), writers.DELETING_SUFFIX))
            try:
                os.rename(path, doomed)
                _fsync_dir(parent)
            except FileNotFoundError:
                return  # another writer deleted (or renamed) it first
            except OSError:
                doomed = path  # e.g. no write permission on the parent: delete in place
        _rmtree(doomed)

    def begin_write(self, final: str) -> str:
        """A fresh hidden sibling of ``final`` on the same filesystem (so rename is atomic), claimed.

        Its owner record, the sibling file ``<staging>.owner``, is written before the folder is
        created, and its mtime is refreshed by a heartbeat until ``commit`` or ``abort``.
        """
        parent, name = os.path.split(final.rstrip(os.sep))
        if not name:
            raise CheckpointError(f"Cannot save a checkpoint at {final!r}: it names no folder.")
        if os.path.lexists(final) and (os.path.islink(final) or not os.path.isdir(final)):
            raise CheckpointError(f"Cannot save a checkpoint at {final!r}: a file or link is in the way.")
        if os.path.isdir(final):
            foreign = _first_foreign_file(final)
            if foreign is not None:
                raise foreign_file_error(final, foreign)
        # What earlier saves to this path left (a killed process's staging folder): the
        # same rules as a manager's cleanup, so another live writer's is never touched.
        self._remove_stale_tmp(parent, lambda target: target == name)
        wid = writers.new_write_id()
        staging = os.path.join(parent, writers.tmp_name(name, wid))
        record = staging + writers.OWNER_SUFFIX
        owner = writers.Owner.of_this_process(wid)
        try:
            os.makedirs(parent, exist_ok=True)
            # The record first: a staging folder without one is a leftover that may go at once.
            _write_record(record, owner.to_bytes())
            os.mkdir(staging)
        except OSError as err:
            with contextlib.suppress(OSError):
                os.unlink(record)
            raise _write_error("Creating the folder", staging, err) from err
        writers.claim(self.uri(staging), owner, lambda _beat: _touch(record))
        with self._lock:
            self._stagings.add(staging)
        return staging

    def check_owned(self, staging: str, files: Collection[str] = ()) -> None:
        """The owner record beside ``staging`` is still there and still names this save."""
        self._check_owned(staging, writers.current(self.uri(staging)))

    def _check_owned(self, staging: str, claim: writers.Claim | None) -> None:
        parent, name = os.path.split(staging.rstrip(os.sep))
        parsed = writers.parse_tmp_name(name)
        wid = claim.owner.id if claim is not None else (parsed.id if parsed is not None else "")
        final = os.path.join(parent, parsed.target) if parsed is not None else staging
        record = staging + writers.OWNER_SUFFIX
        data, _mtime = _read_record(record)
        owner = writers.Owner.from_bytes(data)
        problem = ""
        if claim is not None and claim.lost:
            problem = f"its heartbeat found {record} gone"
        elif data is None:
            problem = f"its owner record {record} is gone"
        elif owner is None or owner.id != wid:
            problem = f"its owner record {record} no longer names this save"
        elif not os.path.isdir(staging):
            problem = f"its staging folder {staging} is gone"
        if problem:
            raise CheckpointError(writers.lost_error(final, problem))

    def commit(self, staging: str, final: str) -> None:
        """Check the staging folder is still ours, fsync its tree, then rename (or swap) it into place."""
        claim = writers.release(self.uri(staging))
        self._check_owned(staging, claim)
        try:
            try:
                self._commit(staging, final)
            finally:
                with self._lock:
                    self._stagings.discard(staging)
        except OSError as err:
            if not os.path.isdir(staging) and not os.path.isdir(staging + writers.OLD_SUFFIX):
                raise CheckpointError(writers.lost_error(final, f"its staging folder {staging} is gone")) from err
            raise _write_error("Committing the checkpoint", final, err) from err

    def _commit(self, staging: str, final: str) -> None:
        # Two syncs make a commit durable, and both are needed: the staging tree (every
        # file's bytes and every folder's entries) before the rename, so that the rename
        # can never expose a folder whose files a crash would lose; the parent folder after
        # it, so that the commit itself survives a crash before this call returns (the
        # manager deletes older checkpoints only after that).
        _sync_tree(staging)
        parent = os.path.dirname(final.rstrip(os.sep))
        record = staging + writers.OWNER_SUFFIX
        # Another writer may create or delete ``final`` between our look and our rename (two
        # jobs on one root, retention): a rename that meets the other state tries again.
        for attempt in range(3):
            last = attempt == 2
            if os.path.isdir(final) and not os.path.islink(final):
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
                        self._discard(staging, record)  # the staging name now holds the old checkpoint
                        return
                    if ctypes.get_errno() == errno.ENOENT and not last:
                        continue  # ``final`` went meanwhile: a plain rename now
                old = staging + writers.OLD_SUFFIX
                try:
                    os.rename(final, old)
                except FileNotFoundError:
                    if last:
                        raise
                    continue
                os.rename(staging, final)
                _fsync_dir(parent)
                self._discard(old, record)
                return
            try:
                os.rename(staging, final)
            except OSError as err:
                if err.errno in (errno.ENOTEMPTY, errno.EEXIST) and not last:
                    continue  # ``final`` appeared meanwhile: swap instead
                raise
            _fsync_dir(parent)
            with contextlib.suppress(OSError):
                os.unlink(record)
            return

    def _discard(self, folder: str, record: str) -> None:
        """After a commit: delete the replaced checkpoint, then the owner record.

        No rename first: the folder's hidden name and the record beside it already make a
        crash half-way a leftover that the next cleanup removes (the record's process is gone).
        """
        with contextlib.suppress(OSError):
            _rmtree(folder)
        with contextlib.suppress(OSError):
            os.unlink(record)

    def abort(self, staging: str, final: str) -> None:
        """Remove the staging folder and its owner record; ``final`` was never touched."""
        writers.release(self.uri(staging))
        with self._lock:
            self._stagings.discard(staging)
        shutil.rmtree(staging, ignore_errors=True)
        with contextlib.suppress(OSError):
            os.unlink(staging + writers.OWNER_SUFFIX)

    def remove_leftovers(self, root: str, is_target: Callable[[str], bool]) -> list[str]:
        """Remove ``-deleting`` folders, staging folders of gone writers, and uncommitted target folders.

        A staging folder goes with its owner record, once the record is missing or its
        writer is gone (``writers.gone_because``): the record first, so that the writer,
        were it still alive, fails its commit instead of committing a half-deleted folder.
        """
        removed: list[str] = []
        for name in self.listdir(root):
            path = os.path.join(root, name)
            if (
                writers.parse_tmp_name(name) is None
                and is_target(name)
                and self.isdir(path)
                and not os.path.lexists(os.path.join(path, MANIFEST))
            ):
                self.remove_tree(path)  # never committed: only a rename makes a step folder here
                removed.append(name)
        return removed + self._remove_stale_tmp(root, is_target)

    def _remove_stale_tmp(self, root: str, is_target: Callable[[str], bool]) -> list[str]:
        """Remove the hidden leftovers under ``root`` of targets passing ``is_target`` (see remove_leftovers)."""
        removed: list[str] = []
        saves: dict[tuple[str, str], list[str]] = {}
        for name in self.listdir(root):
            path = os.path.join(root, name)
            parsed = writers.parse_tmp_name(name)
            if parsed is None:
                continue
            if not is_target(parsed.target):
                continue
            elif parsed.suffix == writers.DELETING_SUFFIX:
                self.remove_tree(path)  # a delete was interrupted; finishing it twice is harmless
                removed.append(name)
            elif parsed.suffix == writers.OLD_SUFFIX:
                if self.isdir(os.path.join(root, parsed.target)):
                    self.remove_tree(path)  # the commit that moved it aside completed
                    removed.append(name)
            else:
                saves.setdefault((parsed.target, parsed.id), []).append(name)
        for (target, wid), names in sorted(saves.items()):
            staging = os.path.join(root, writers.tmp_name(target, wid))
            record = staging + writers.OWNER_SUFFIX
            data, mtime = _read_record(record)
            if writers.gone_because(writers.Owner.from_bytes(data), mtime) is None:
                continue  # a save in flight: never another writer's to delete
            with contextlib.suppress(FileNotFoundError):
                os.unlink(record)
            self.remove_tree(staging)
            removed += names
        return removed

    def link_or_copy(self, src: str, dst: str) -> None:
        """A hard link when possible (same filesystem), else a copy."""
        try:
            os.link(src, dst, follow_symlinks=False)
        except OSError:
            try:
                shutil.copyfile(src, dst, follow_symlinks=False)
            except OSError as err:
                raise _write_error("Copying", f"{src} to {dst}", err) from err

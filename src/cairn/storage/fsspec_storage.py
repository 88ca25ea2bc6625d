"""Storage on any fsspec filesystem (object stores, memory, ...), with retries.

Object stores cannot rename a folder, so the commit marker is the root
``manifest.json``, written last by the engine. Before a checkpoint is written
over an existing one, the old manifest is deleted first, so that no reader can
ever see a mix of old and new files as a committed checkpoint.
"""

from __future__ import annotations

import contextlib
import random
import time
import zlib
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from cairn.errors import CheckpointError
from cairn.storage.base import Chunk, Storage

T = TypeVar("T")

MANIFEST = "manifest.json"
RETRY_ATTEMPTS = 5
RETRY_BASE_DELAY = 0.05
RETRY_MAX_DELAY = 2.0
RANGED_READ_LIMIT = 64 * 1024 * 1024  # bounded reads up to this are one ranged GET (JSON files included)


def is_transient(err: BaseException) -> bool:
    """Whether an error from a remote store is worth retrying (timeouts, 5xx, throttling)."""
    if isinstance(err, FileNotFoundError | PermissionError | IsADirectoryError | NotADirectoryError):
        return False
    if isinstance(err, TimeoutError | ConnectionError):
        return True
    text = f"{type(err).__name__} {err}".lower()
    markers = (
        "timeout",
        "timed out",
        "throttl",
        "slowdown",
        "slow down",
        "503",
        "500",
        "502",
        "504",
        "internalerror",
        "serviceunavailable",
        "connection",
        "temporar",
        "reset by peer",
    )
    return isinstance(err, OSError) and any(m in text for m in markers)


class FsspecStorage(Storage):
    """Any fsspec filesystem; remote calls are retried with exponential backoff."""

    atomic_rename = False

    def __init__(self, fs: Any, *, attempts: int = RETRY_ATTEMPTS, base_delay: float = RETRY_BASE_DELAY) -> None:
        """Wrap ``fs``; ``attempts`` bounds the tries of each remote call."""
        self.fs = fs
        self.attempts = attempts
        self.base_delay = base_delay

    def _retry(self, what: str, path: str, fn: Callable[[], T], *, write: bool = False) -> T:
        """Call ``fn``, retrying transient errors with exponential backoff and jitter.

        After ``attempts`` tries the last error is raised as a ``CheckpointError``
        naming the path. Other errors are raised at once: as they are for reads (the
        engine turns a missing file into the documented error), and as a
        ``CheckpointError`` naming the path for writes (``write=True``).
        """
        delay = self.base_delay
        for attempt in range(1, self.attempts + 1):
            try:
                return fn()
            except CheckpointError:
                raise
            except Exception as err:
                if not is_transient(err):
                    if write and isinstance(err, OSError):
                        raise CheckpointError(
                            f"{what} {self.uri(path)} failed: {type(err).__name__}: {err}. "
                            "Check the path, the permissions and the storage service."
                        ) from err
                    raise
                if attempt == self.attempts:
                    raise CheckpointError(
                        f"{what} {self.uri(path)} failed {self.attempts} times with transient errors; "
                        f"the last was {type(err).__name__}: {err}. Check the storage service and "
                        "try again."
                    ) from err
                time.sleep(min(delay, RETRY_MAX_DELAY) * (0.5 + random.random()))
                delay *= 2
        raise AssertionError("unreachable")  # pragma: no cover

    def _invalidate(self, path: str) -> None:
        """Forget cached listings of ``path`` and its parents.

        fsspec filesystems (s3fs among them) cache folder listings and answer
        ``exists``/``info``/``size`` from them; another writer (another process,
        another client) may have changed the folder since. A checkpoint's commit
        state must be read fresh: a stale "no manifest here" would let a save over
        an existing checkpoint keep the old commit marker while writing new files.
        """
        invalidate = getattr(self.fs, "invalidate_cache", None)
        if invalidate is not None:
            invalidate(path)

    def join(self, *parts: str) -> str:
        """Join with '/'."""
        return "/".join(p.rstrip("/") for p in parts if p)

    def uri(self, path: str) -> str:
        """``fs.unstrip_protocol`` (``memory://...``, ``s3://...``)."""
        return str(self.fs.unstrip_protocol(path))

    def write_file(self, path: str, chunks: Iterable[Chunk]) -> tuple[int, int]:
        """Write all chunks in one object upload; the chunks are materialized once for retries."""
        # Object stores upload whole objects; keeping the chunks lets a retry resend them.
        parts = [memoryview(c).cast("B") for c in chunks]
        crc = 0
        size = 0
        for mv in parts:
            crc = zlib.crc32(mv, crc)
            size += len(mv)

        def put() -> None:
            with self.fs.open(path, "wb") as f:
                for mv in parts:
                    f.write(mv)

        self._retry("Writing", path, put, write=True)
        return size, crc

    def read_file(self, path: str, *, max_bytes: int | None = None) -> bytearray:
        """``fs.cat_file`` with retries and an optional size bound.

        A bounded read of a small file is one ranged GET of ``max_bytes + 1`` bytes
        (no separate size request); a larger bound asks for the size first, so that
        an oversized object is refused before it is downloaded.
        """
        if max_bytes is not None and max_bytes <= RANGED_READ_LIMIT:
            data = self._retry("Reading", path, lambda: self.fs.cat_file(path, start=0, end=max_bytes + 1))
            if len(data) > max_bytes:
                self._too_big(path, None, max_bytes)
            return bytearray(data)
        if max_bytes is not None:
            size = self.size(path)
            if size > max_bytes:
                self._too_big(path, size, max_bytes)
        data = self._retry("Reading", path, lambda: self.fs.cat_file(path))
        return bytearray(data)

    def _too_big(self, path: str, size: int | None, max_bytes: int) -> None:
        from cairn.errors import CorruptCheckpointError

        what = f"{size} bytes" if size is not None else f"over {max_bytes} bytes"
        raise CorruptCheckpointError(
            f"{self.uri(path)} is {what}, over the limit of {max_bytes} for this kind "
            "of file; it is corrupt or hostile."
        )

    def read_range(self, path: str, start: int, end: int) -> bytes:
        """A ranged GET."""
        return bytes(self._retry("Reading", path, lambda: self.fs.cat_file(path, start=start, end=end)))

    def read_into(self, path: str, buffers: list[memoryview]) -> int:
        """Read the object and scatter it into ``buffers``."""
        data = memoryview(self.read_file(path))
        pos = 0
        for b in buffers:
            view = b.cast("B")
            n = min(len(view), len(data) - pos)
            view[:n] = data[pos : pos + n]
            pos += n
        return pos

    def size(self, path: str) -> int:
        """``fs.size`` with retries."""
        self._invalidate(path)
        return int(self._retry("Reading the size of", path, lambda: self.fs.size(path)))

    def exists(self, path: str) -> bool:
        """``fs.exists`` with retries."""
        self._invalidate(path)
        return bool(self._retry("Checking", path, lambda: self.fs.exists(path)))

    def isdir(self, path: str) -> bool:
        """``fs.isdir`` with retries."""
        self._invalidate(path)
        return bool(self._retry("Checking", path, lambda: self.fs.isdir(path)))

    def listdir(self, path: str) -> list[str]:
        """Entry names; empty when missing."""

        def ls() -> list[str]:
            try:
                entries = self.fs.ls(path, detail=False)
            except FileNotFoundError:
                return []
            base = self.fs._strip_protocol(path).rstrip("/")
            names = []
            for e in entries:
                e = self.fs._strip_protocol(e).rstrip("/")
                if e != base:
                    names.append(e.rsplit("/", 1)[-1])
            return sorted(set(names))

        self._invalidate(path)
        return self._retry("Listing", path, ls)

    def makedirs(self, path: str) -> None:
        """Object stores have no folders; memory:// and others may."""
        self._retry("Creating", path, lambda: self.fs.makedirs(path, exist_ok=True), write=True)

    def remove(self, path: str) -> None:
        """Delete one object."""
        self._retry("Deleting", path, lambda: self.fs.rm_file(path), write=True)

    def remove_tree(self, path: str) -> None:
        """Delete everything under ``path``."""

        def rm() -> None:
            with contextlib.suppress(FileNotFoundError):
                self.fs.rm(path, recursive=True)

        self._invalidate(path)
        self._retry("Deleting", path, rm, write=True)
        self._invalidate(path)

    def begin_write(self, final: str) -> str:
        """Uncommit and clear an existing checkpoint at ``final``; write in place."""
        manifest = self.join(final, MANIFEST)
        if self.exists(manifest):
            # Delete the commit marker first: from here on no reader sees the old checkpoint
            # as committed, so old and new files can never be mixed in a committed view.
            self.remove(manifest)
        if self.exists(final):
            self.remove_tree(final)
        self.makedirs(final)
        return final

    def commit(self, staging: str, final: str) -> None:
        """Nothing to do: the engine wrote the root manifest last."""
        self._invalidate(final)

    def abort(self, staging: str, final: str) -> None:
        """Remove the partial files; the root manifest was never written."""
        with contextlib.suppress(Exception):
            self.remove_tree(staging)

    def link_or_copy(self, src: str, dst: str) -> None:
        """A server-side copy."""
        self._retry("Copying", src, lambda: self.fs.copy(src, dst), write=True)

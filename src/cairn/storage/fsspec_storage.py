"""Storage on any fsspec filesystem (object stores, memory, ...), with retries.

Object stores cannot rename a folder, so the commit marker is the root
``manifest.json``, written last by the engine. Before a checkpoint is written
over an existing one, the old manifest is deleted first, so that no reader can
ever see a mix of old and new files as a committed checkpoint.
"""

from __future__ import annotations

import contextlib
import errno
import random
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from cairn._crc import crc32
from cairn.errors import CheckpointError
from cairn.storage.base import CHECKPOINT_FILES, Chunk, Storage, foreign_file_error

T = TypeVar("T")
monotonic = time.monotonic  # the real clock, also where tests replace ``time`` to record the backoff sleeps

MANIFEST = "manifest.json"
RETRY_ATTEMPTS = 5
RETRY_BASE_DELAY = 0.05
RETRY_MAX_DELAY = 2.0
RANGED_READ_LIMIT = 64 * 1024 * 1024  # bounded reads up to this are one ranged GET (JSON files included)
TRANSFER_FLOOR_RATE = 1 << 20
"""Bytes per second: a call moving n bytes gets ``deadline + n / TRANSFER_FLOOR_RATE`` seconds.

The deadline bounds a storage that stops answering; a large upload on a slow
but working link must not be cut off by it.
"""


class _Overdue(Exception):
    """An attempt still running when the time of its call ran out."""


def _within(fn: Callable[[], T], seconds: float) -> T:
    """Run ``fn`` in a helper thread and wait at most ``seconds`` for it.

    The only way to bound a call into a filesystem that cairn did not build (and
    whose own timeouts and retries it cannot see): when the time runs out the
    thread is abandoned (a daemon, it ends with the process or when its socket
    times out) and ``_Overdue`` is raised. Its result, if one ever comes, is
    dropped.
    """
    box: list[Any] = []
    failed: list[BaseException] = []
    done = threading.Event()

    def run() -> None:
        try:
            box.append(fn())
        except BaseException as err:  # handed to the waiting thread, which raises it
            failed.append(err)
        finally:
            done.set()

    threading.Thread(target=run, name="cairn-storage-call", daemon=True).start()
    if not done.wait(max(seconds, 0.0)):
        raise _Overdue
    if failed:
        raise failed[0]
    return box[0]  # type: ignore[no-any-return]


# errno values of transient failures. s3fs turns S3's SlowDown / ServiceUnavailable (503)
# into OSError(EBUSY, <server message>) and InternalError (500) into OSError(EREMOTEIO, ...):
# the message alone does not say "503", so the errno and the chained botocore error count.
_EREMOTEIO = getattr(errno, "EREMOTEIO", 121)
TRANSIENT_ERRNOS = frozenset(
    {
        errno.EAGAIN,
        errno.EBUSY,
        errno.ETIMEDOUT,
        errno.ECONNRESET,
        errno.ECONNABORTED,
        errno.ECONNREFUSED,
        errno.EPIPE,
        errno.ENETUNREACH,
        errno.EHOSTUNREACH,
        errno.ENETDOWN,
        _EREMOTEIO,
    }
)
TRANSIENT_STATUS = frozenset({408, 429, 500, 502, 503, 504})
TRANSIENT_CODES = frozenset(
    {
        "SlowDown",
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "RequestThrottled",
        "RequestLimitExceeded",
        "TooManyRequests",
        "TooManyRequestsException",
        "RequestTimeout",
        "RequestTimeoutException",
        "InternalError",
        "InternalFailure",
        "ServiceUnavailable",
        "OperationAborted",
        "500",
        "502",
        "503",
        "504",
    }
)
# Connection-level failures of the HTTP stacks under fsspec backends (botocore, aiohttp, urllib3),
# matched by class name so that none of them has to be imported.
TRANSIENT_CLASS_NAMES = frozenset(
    {
        "ReadTimeoutError",
        "ConnectTimeoutError",
        "EndpointConnectionError",
        "ConnectionClosedError",
        "ResponseStreamingError",
        "IncompleteReadError",
        "ServerDisconnectedError",
        "ServerTimeoutError",
        "ClientConnectionError",
        "ClientOSError",
        "ClientPayloadError",
        "ProtocolError",
        "RemoteDisconnected",
        "IncompleteRead",
    }
)
_TEXT_MARKERS = (
    "timeout",
    "timed out",
    "throttl",
    "slowdown",
    "slow down",
    "reduce your request rate",
    "please try again",
    "service unavailable",
    "serviceunavailable",
    "internal error",
    "internalerror",
    "bad gateway",
    "gateway timeout",
    "too many requests",
    "503",
    "500",
    "502",
    "504",
    "connection",
    "temporar",
    "reset by peer",
)


def _one_is_transient(err: BaseException) -> bool:
    if isinstance(err, CheckpointError):
        return False
    if isinstance(err, FileNotFoundError | PermissionError | IsADirectoryError | NotADirectoryError | FileExistsError):
        return False
    if isinstance(err, TimeoutError | ConnectionError):
        return True
    if isinstance(err, OSError) and err.errno in TRANSIENT_ERRNOS:
        return True
    if any(c.__name__ in TRANSIENT_CLASS_NAMES for c in type(err).__mro__):
        return True
    response = getattr(err, "response", None)  # botocore's ClientError
    if isinstance(response, dict):
        error = response.get("Error") or {}
        meta = response.get("ResponseMetadata") or {}
        if str(error.get("Code", "")) in TRANSIENT_CODES or meta.get("HTTPStatusCode") in TRANSIENT_STATUS:
            return True
    for attr in ("status", "status_code", "code"):  # aiohttp, requests, gcsfs HttpError
        value = getattr(err, attr, None)
        if type(value) is int and value in TRANSIENT_STATUS:
            return True
    if isinstance(err, OSError):
        text = f"{type(err).__name__} {err}".lower()
        return any(m in text for m in _TEXT_MARKERS)
    return False


def is_transient(err: BaseException) -> bool:
    """Whether an error from a remote store is worth retrying (timeouts, resets, 5xx, throttling).

    Looks at the error and at what it was raised from: backends translate the
    HTTP layer's errors (s3fs turns a 503 SlowDown into ``OSError(EBUSY, "Please
    reduce your request rate.")``) and chain the original. A missing file, a
    permission error or a cairn error is never transient.
    """
    if isinstance(err, FileNotFoundError | PermissionError | IsADirectoryError | NotADirectoryError | CheckpointError):
        return False
    seen: set[int] = set()
    current: BaseException | None = err
    while current is not None and id(current) not in seen and len(seen) < 8:
        seen.add(id(current))
        if _one_is_transient(current):
            return True
        current = current.__cause__ or current.__context__
    return False


class FsspecStorage(Storage):
    """Any fsspec filesystem; every remote call is retried and bounded by a deadline.

    This is the one place where remote calls are retried (SPEC 8): transient
    errors (:func:`is_transient`) are retried with exponential backoff, at most
    ``attempts`` tries and never past the call's deadline. Each call (a read, a
    write, a listing, a whole ``remove_tree``) gets ``deadline`` seconds, plus
    one second per MiB it moves; when they run out, it raises a
    ``CheckpointError`` naming the operation and the path, even if the
    filesystem underneath never answers.

    The retries of the filesystem itself multiply with these: ``s3://`` URIs
    resolved by cairn get an s3fs with its own and botocore's retries off and
    its timeouts within the deadline; a filesystem passed in by the user keeps
    what it was built with.
    """

    atomic_rename = False
    server_side_copy = True

    def __init__(
        self,
        fs: Any,
        *,
        attempts: int = RETRY_ATTEMPTS,
        base_delay: float = RETRY_BASE_DELAY,
        deadline: float | None = None,
    ) -> None:
        """Wrap ``fs``.

        Args:
            fs: The fsspec filesystem.
            attempts: Tries of each remote call at most.
            base_delay: The first backoff delay in seconds (doubling, capped at 2 s).
            deadline: Seconds each call may take, retries included; default
                ``$CAIRN_STORAGE_DEADLINE``, else 60.
        """
        self.fs = fs
        self.attempts = attempts
        self.base_delay = base_delay
        from cairn.storage.base import check_deadline

        self.deadline: float = check_deadline(deadline)

    def _retry(
        self,
        what: str,
        path: str,
        fn: Callable[[], T],
        *,
        write: bool = False,
        nbytes: int = 0,
        until: float | None = None,
    ) -> T:
        """Call ``fn``, retrying transient errors with exponential backoff and jitter, within the deadline.

        After ``attempts`` tries, or when the call's time (``deadline`` plus
        ``nbytes`` at the floor rate, or up to the ``until`` of a caller that
        bounds several calls together) runs out, a ``CheckpointError`` naming the
        path is raised. Other errors are raised at once: as they are for reads
        (the engine turns a missing file into the documented error), and as a
        ``CheckpointError`` naming the path for writes (``write=True``).
        """
        started = monotonic()
        end = started + self.deadline + nbytes / TRANSFER_FLOOR_RATE
        if until is not None:
            end = min(end, until)
        delay = self.base_delay
        last: BaseException | None = None
        for attempt in range(1, self.attempts + 1):
            left = end - monotonic()
            if left <= 0:  # never start a call that would be abandoned at once
                raise self._overdue(what, path, started, attempt - 1, last) from last
            try:
                return _within(fn, left)
            except _Overdue:
                raise self._overdue(what, path, started, attempt, last) from last
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
                last = err
                if attempt == self.attempts:
                    raise CheckpointError(
                        f"{what} {self.uri(path)} failed {self.attempts} times with transient errors; "
                        f"the last was {type(err).__name__}: {err}. Check the storage service and "
                        "try again."
                    ) from err
                pause = min(delay, RETRY_MAX_DELAY) * (0.5 + random.random())
                if monotonic() + pause >= end:
                    raise self._overdue(what, path, started, attempt, last) from err
                time.sleep(pause)
                delay *= 2
        raise AssertionError("unreachable")  # pragma: no cover

    def _overdue(self, what: str, path: str, started: float, tries: int, last: BaseException | None) -> CheckpointError:
        """The error of a call whose time ran out."""
        from cairn.storage.base import DEADLINE_ENV

        spent = monotonic() - started
        cause = f"; the last error was {type(last).__name__}: {last}" if last is not None else ", with no answer"
        return CheckpointError(
            f"{what} {self.uri(path)} gave up after {spent:.1f} s ({tries} tries{cause}): the storage "
            f"deadline is {self.deadline:g} s per call. The storage service is down, unreachable or "
            "overloaded: check it and try again, or allow more time (FsspecStorage(fs, deadline=...), "
            f"resolve_storage(..., deadline=...) or ${DEADLINE_ENV})."
        )

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
            crc = crc32(mv, crc)
            size += len(mv)

        def put() -> None:
            with self.fs.open(path, "wb") as f:
                for mv in parts:
                    f.write(mv)

        self._retry("Writing", path, put, write=True, nbytes=size)
        return size, crc

    def read_file(self, path: str, *, max_bytes: int | None = None) -> bytearray:
        """``fs.cat_file`` with retries and an optional size bound.

        A bounded read of a small file is one ranged GET of ``max_bytes + 1`` bytes
        (no separate size request); a larger bound asks for the size first, so that
        an oversized object is refused before it is downloaded.
        """
        if max_bytes is not None and max_bytes <= RANGED_READ_LIMIT:
            data = self._retry(
                "Reading", path, lambda: self.fs.cat_file(path, start=0, end=max_bytes + 1), nbytes=max_bytes
            )
            if len(data) > max_bytes:
                self._too_big(path, None, max_bytes)
            return bytearray(data)
        if max_bytes is not None:
            size = self.size(path)
            if size > max_bytes:
                self._too_big(path, size, max_bytes)
        data = self._retry("Reading", path, lambda: self.fs.cat_file(path), nbytes=max_bytes or 0)
        return bytearray(data)

    def _too_big(self, path: str, size: int | None, max_bytes: int) -> None:
        from cairn.storage.base import FileTooLargeError

        what = f"{size} bytes" if size is not None else f"over {max_bytes} bytes"
        raise FileTooLargeError(
            f"{self.uri(path)} is {what}, over the limit of {max_bytes} for this kind "
            "of file; it is corrupt or hostile."
        )

    def read_range(self, path: str, start: int, end: int) -> bytes:
        """A ranged GET."""
        return bytes(
            self._retry(
                "Reading", path, lambda: self.fs.cat_file(path, start=start, end=end), nbytes=max(0, end - start)
            )
        )

    def size(self, path: str) -> int:
        """``fs.size`` with retries."""
        self._invalidate(path)
        return int(self._retry("Reading the size of", path, lambda: self.fs.size(path)))

    def _kind(self, path: str) -> str | None:
        """``fs.info(path)["type"]`` ("file", "directory"), None when nothing is there.

        Not ``fs.exists`` / ``fs.isdir``: fsspec's answer "no" to those on *any*
        error (a 503, a timeout), and an outage taken for "no checkpoint here" would
        let a save keep an old commit marker. Here only a missing path is "no";
        other errors are retried, then raised.
        """

        def info() -> str | None:
            try:
                return str(self.fs.info(path).get("type", ""))
            except FileNotFoundError:
                return None

        self._invalidate(path)
        return self._retry("Checking", path, info, write=True)

    def exists(self, path: str) -> bool:
        """Whether anything is at ``path`` (errors are errors, not "no")."""
        return self._kind(path) is not None

    def isdir(self, path: str) -> bool:
        """Whether ``path`` is a folder (errors are errors, not "no")."""
        return self._kind(path) == "directory"

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
        """Delete everything under ``path``, the commit marker first, within one deadline.

        Bulk deletes on object stores happen in no particular order; deleting the
        root manifest first means that a crash half-way leaves an uncommitted
        folder (which readers treat as absent and managers clean up), never a
        committed checkpoint with missing files. Both steps share one deadline,
        so that the cleanup after a failed save is bounded as the save was; when
        it runs out, the error says what is left behind.
        """
        until = monotonic() + self.deadline
        marker = self.join(path, MANIFEST)

        def rm_marker() -> None:
            with contextlib.suppress(FileNotFoundError):
                self.fs.rm_file(marker)

        def rm() -> None:
            with contextlib.suppress(FileNotFoundError):
                self.fs.rm(path, recursive=True)

        marker_gone = False
        try:
            self._retry("Deleting", marker, rm_marker, write=True, until=until)
            marker_gone = True
            self._invalidate(path)
            self._retry("Deleting", path, rm, write=True, until=until)
        except CheckpointError as err:
            left = (
                "its files are left behind, uncommitted (no root manifest.json): readers treat the folder as "
                "absent, and the next save at this path or a CheckpointManager's cleanup deletes them"
                if marker_gone
                else "it is left as it was"
            )
            raise CheckpointError(f"{err} Deleting {self.uri(path)} did not finish: {left}.") from err
        finally:
            self._invalidate(path)

    def begin_write(self, final: str) -> str:
        """Uncommit and clear an existing checkpoint at ``final``; write in place.

        Refuses (before deleting anything) when ``final`` is a file, or a folder
        holding files that are not a checkpoint's.
        """
        self._invalidate(final)
        if self._retry("Checking", final, lambda: self.fs.isfile(final)):
            raise CheckpointError(f"Cannot save a checkpoint at {self.uri(final)}: a file is in the way.")
        existing = self._retry("Listing", final, lambda: self._find(final))
        foreign = next((p for p in existing if p.rstrip("/").rsplit("/", 1)[-1] not in CHECKPOINT_FILES), None)
        if foreign is not None:
            raise foreign_file_error(self.uri(final), self.uri(foreign))
        manifest = self.join(final, MANIFEST)
        if self.exists(manifest):
            # Delete the commit marker first: from here on no reader sees the old checkpoint
            # as committed, so old and new files can never be mixed in a committed view.
            self.remove(manifest)
        if self.exists(final):
            self.remove_tree(final)
        self.makedirs(final)
        return final

    def _find(self, folder: str) -> list[str]:
        """Every file below ``folder`` (empty when it does not exist)."""
        try:
            found = self.fs.find(folder)
        except FileNotFoundError:
            return []
        return [str(p) for p in found if not str(p).endswith("/")]

    def commit(self, staging: str, final: str) -> None:
        """Nothing to do: the engine wrote the root manifest last."""
        self._invalidate(final)

    def abort(self, staging: str, final: str) -> None:
        """Remove the partial files; the root manifest was never written."""
        with contextlib.suppress(Exception):
            self.remove_tree(staging)

    def link_or_copy(self, src: str, dst: str) -> None:
        """A server-side copy, with time for its bytes (a large object copies for a while)."""
        size = self.size(src)
        self._retry("Copying", src, lambda: self.fs.copy(src, dst), write=True, nbytes=size)

"""Storage on any fsspec filesystem (object stores, memory, ...), with retries.

Object stores cannot rename a folder, so the commit marker is the root
``manifest.json``, written last by the engine. Before a checkpoint is written
over an existing one, the old manifest is deleted first, so that no reader can
ever see a mix of old and new files as a committed checkpoint.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import errno
import logging
import random
import re
import threading
import time
from collections.abc import Callable, Collection, Iterable
from dataclasses import replace
from typing import Any, Protocol, TypeVar

from cairn.errors import CheckpointError, CheckpointNotFoundError
from cairn.manifest import DIGEST_ALGORITHM, MANIFEST, FileEntry, Hasher
from cairn.storage import writers
from cairn.storage.base import Chunk, ObjectChangedError, Storage, foreign_file_error, replaceable_file

T = TypeVar("T")
_LOG = logging.getLogger(__name__)
"""``cairn.storage.fsspec_storage``: warning, each retry after a transient error (docs/cli.md, "Logging")."""
monotonic = time.monotonic  # the real clock, also where tests replace ``time`` to record the backoff sleeps

RETRY_ATTEMPTS = 5
RETRY_BASE_DELAY = 0.05
RETRY_MAX_DELAY = 2.0
RANGED_READ_LIMIT = 64 * 1024 * 1024  # bounded reads up to this are one ranged GET (JSON files included)
MULTIPART_THRESHOLD = 16 * 1024 * 1024
"""Files of at least this many bytes go to and come from S3 in parts moved concurrently (smaller ones: one
PUT, one GET)."""
MULTIPART_PART_BYTES = 8 * 1024 * 1024
"""Bytes per part or ranged GET (``aws s3 cp``'s default; more for a file over 10,000 parts of this size)."""
MULTIPART_CONCURRENCY = 8
"""Parts of one file in flight at once (``aws s3 cp`` sends 10 requests at once, boto3's transfer manager 10)."""
MAX_PARTS = 10_000
"""S3's limit on the parts of one upload."""
MAX_UPLOAD_PAGES = 10
"""Pages of unfinished multipart uploads (1000 each) one cleanup lists at most."""
TRANSFER_FLOOR_RATE = 1 << 20
"""Bytes per second: a call moving n bytes gets ``deadline + n / TRANSFER_FLOOR_RATE`` seconds.

The deadline bounds a storage that stops answering; a large upload on a slow
but working link must not be cut off by it.
"""


class FilesystemSource(Protocol):
    """Where a process finds the filesystem of an :meth:`FsspecStorage.by_reference` copy (picklable)."""

    def resolve(self) -> Any:
        """The fsspec filesystem, in the process that calls it."""


class _Overdue(Exception):
    """An attempt still running when the time of its call ran out."""


class _NoTime(_Overdue):
    """No time was left to start an attempt: it was not started."""


def _within(fn: Callable[[], T], end: float) -> T:
    """Run ``fn`` in a helper thread and wait for it until the :func:`monotonic` time ``end``.

    The only way to bound a call into a filesystem that cairn did not build (and
    whose own timeouts and retries it cannot see): when the time runs out the
    thread is abandoned (a daemon, it ends with the process or when its socket
    times out) and ``_Overdue`` is raised. Its result, if one ever comes, is
    dropped. A call is never started at or after ``end`` (``_NoTime``), and the
    wait ends at ``end`` itself, however long starting the thread took: an
    operation whose calls share one end never runs past it.
    """
    if monotonic() >= end:
        raise _NoTime
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
    if not done.wait(max(end - monotonic(), 0.0)):
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


CREDENTIAL_ERROR_NAMES = frozenset(
    {
        "NoCredentialsError",  # botocore: no key in the environment, profile, or instance role
        "PartialCredentialsError",  # botocore: a key without its secret, say
        "CredentialRetrievalError",  # botocore: a credential process or role that failed
        "DefaultCredentialsError",  # google-auth (gcsfs): no application default credentials
    }
)
"""Error classes (by name: no backend is imported) that mean this process has no credentials for the store."""


def missing_credentials(err: BaseException) -> BaseException | None:
    """The error in ``err``'s chain that says this process found no credentials for the store, or None."""
    seen: set[int] = set()
    current: BaseException | None = err
    while current is not None and id(current) not in seen and len(seen) < 8:
        seen.add(id(current))
        if any(c.__name__ in CREDENTIAL_ERROR_NAMES for c in type(current).__mro__):
            return current
        current = current.__cause__ or current.__context__
    return None


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
        self._fs: Any = fs
        self._fs_source: FilesystemSource | None = None  # see by_reference
        protocol = getattr(fs, "protocol", ())  # memory:// lives in this process only
        self.shared_between_processes = "memory" not in ((protocol,) if isinstance(protocol, str) else protocol)
        self.attempts = attempts
        self.base_delay = base_delay
        from cairn.storage.base import check_deadline

        self.deadline: float = check_deadline(deadline)
        self._until: float | None = None  # the shared end of a bounded view (see bounded); None: per call
        self._whole_bytes = 0  # the bytes a bounded view's operation was given time for (for messages)

    def bounded(self, nbytes: int = 0, *, since: float | None = None) -> FsspecStorage:
        """See :meth:`cairn.storage.base.Storage.bounded`."""
        view = copy.copy(self)
        start = monotonic() if since is None else since
        view._until = self._end(start + self.deadline + nbytes / TRANSFER_FLOOR_RATE)
        view._whole_bytes = nbytes
        return view

    def _end(self, end: float) -> float:
        """``end``, or the bounded view's shared end when that comes first."""
        return end if self._until is None else min(end, self._until)

    @property
    def fs(self) -> Any:
        """The fsspec filesystem (a copy made by :meth:`by_reference` resolves it on first use)."""
        if self._fs is None:
            if self._fs_source is None:  # pragma: no cover - __init__ sets one of the two
                raise CheckpointError("This storage has no filesystem: it was built without one.")
            self._fs = self._fs_source.resolve()
        return self._fs

    def by_reference(self, source: FilesystemSource) -> FsspecStorage:
        """A copy that pickles with ``source`` in place of its filesystem.

        What travels to another process (a Ray actor's call arguments) is then ``source``,
        which the receiving process resolves to the filesystem on first use, instead of
        the filesystem pickled whole, with any secret it was built with (an s3fs's
        ``key``/``secret`` are in its pickle). In this process the copy uses the same
        filesystem object.
        """
        view = copy.copy(self)
        view._fs_source = source
        return view

    def __copy__(self) -> FsspecStorage:
        # Not through __getstate__ (copy.copy's default): a copy in this process keeps its filesystem.
        view = object.__new__(type(self))
        view.__dict__.update(self.__dict__)
        return view

    def __getstate__(self) -> dict[str, Any]:
        # A monotonic time means nothing in another process (remote actors get their own deadlines).
        state = {**self.__dict__, "_until": None}
        if self._fs_source is not None:
            state["_fs"] = None  # the receiving process resolves the source (see by_reference)
        return state

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
        own = started + self.deadline + nbytes / TRANSFER_FLOOR_RATE
        end = self._end(own)
        if until is not None:
            end = min(end, until)
        # Which allowance ends this call, for its error: the whole operation's, or the call's own.
        whole = end < own
        delay = self.base_delay
        last: BaseException | None = None
        for attempt in range(1, self.attempts + 1):
            try:
                return _within(fn, end)  # never started once ``end`` has passed
            except _NoTime:
                raise self._overdue(what, path, started, attempt - 1, last, nbytes, whole) from last
            except _Overdue:
                raise self._overdue(what, path, started, attempt, last, nbytes, whole) from last
            except CheckpointError:
                raise
            except Exception as err:
                unsigned = missing_credentials(err)
                if unsigned is not None:
                    raise CheckpointError(self._no_credentials(what, path, unsigned)) from err
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
                    raise self._overdue(what, path, started, attempt, last, nbytes, whole) from err
                _LOG.warning(
                    "%s %s failed with a transient error (%s: %s); attempt %d of %d in %.2f s",
                    what,
                    self.uri(path),
                    type(err).__name__,
                    err,
                    attempt + 1,
                    self.attempts,
                    pause,
                )
                time.sleep(pause)
                delay *= 2
        raise AssertionError("unreachable")  # pragma: no cover

    def _no_credentials(self, what: str, path: str, err: BaseException) -> str:
        """The message of a call this process could not sign: no credentials here, and how to give them."""
        import os
        import socket

        return (
            f"{what} {self.uri(path)} failed: this process (pid {os.getpid()} on {socket.gethostname()}) found "
            f"no credentials for the object store ({type(err).__name__}: {err}). Every process that writes or "
            "reads a checkpoint (the driver and each Ray worker) finds them in its own environment: set "
            "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE, or give the node an instance role / "
            "service account) on every node: on KubeRay in the head and worker pod templates (a Secret as "
            "environment variables), elsewhere in each node's environment or ray.init(runtime_env={'env_vars': "
            "{...}}). Or pass filesystem= built with its credentials: cairn's actors get it through Ray's "
            "object store (docs/rl.md, Running on a cluster)."
        )

    def _allowance(self, nbytes: int, *, whole: bool) -> str:
        """What a call was allowed, in words: the whole operation's deadline (a bounded view) or its own."""
        if whole and self._until is not None:
            extra = self._whole_bytes / TRANSFER_FLOOR_RATE
            text = f"{self.deadline:g} s for the whole save, its cleanup included, counted from its start"
            nbytes = self._whole_bytes
        else:
            extra = nbytes / TRANSFER_FLOOR_RATE
            text = f"{self.deadline:g} s per call"
        if nbytes:
            rate = TRANSFER_FLOOR_RATE / (1 << 20)
            text += f", plus {extra:.1f} s for its {nbytes} bytes (at {rate:g} MiB/s)"
        return text

    def _overdue(
        self, what: str, path: str, started: float, tries: int, last: BaseException | None, nbytes: int, whole: bool
    ) -> CheckpointError:
        """The error of a call (moving ``nbytes``) whose time ran out: its own, or the whole operation's."""
        from cairn.storage.base import DEADLINE_ENV

        spent = monotonic() - started
        cause = f"; the last error was {type(last).__name__}: {last}" if last is not None else ", with no answer"
        return CheckpointError(
            f"{what} {self.uri(path)} gave up after {spent:.1f} s ({tries} tries{cause}): the storage "
            f"deadline is {self._allowance(nbytes, whole=whole)}. The storage service is down, unreachable or "
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

    def write_file(self, path: str, chunks: Iterable[Chunk], *, algorithm: str = DIGEST_ALGORITHM) -> FileEntry:
        """Write all chunks in one object upload; the chunks are materialized once for retries."""
        # Object stores upload whole objects; keeping the chunks lets a retry resend them.
        parts = [memoryview(c).cast("B") for c in chunks]
        # The CRC-32 of the same bytes the digest sees (ISA-L, ~10x the digest's speed): the cheap
        # witness cairn._save.check_written compares with the file read back before the commit.
        hasher = Hasher(algorithm, with_crc=True)
        size = 0
        for mv in parts:
            hasher.update(mv)
            size += len(mv)

        def put() -> None:
            if size >= MULTIPART_THRESHOLD and self._is_s3():
                self._put_in_parts(path, parts, size)
                return
            f = self.fs.open(path, "wb")
            try:
                for mv in parts:
                    f.write(mv)
                f.close()
            except BaseException:
                # Not close(): it would complete a multipart upload with the parts sent so far. discard()
                # aborts it (s3fs), so that a failed upload leaves no parts behind (issue 41).
                discard = getattr(f, "discard", None)
                if discard is not None:
                    with contextlib.suppress(Exception):
                        discard()
                        f.closed = True  # discarded: its __del__ must not try to complete the upload
                raise

        self._retry("Writing", path, put, write=True, nbytes=size)
        return hasher.entry(size)

    def _is_s3(self) -> bool:
        protocol = getattr(self.fs, "protocol", ())
        return hasattr(self.fs, "_call_s3") and "s3" in ((protocol,) if isinstance(protocol, str) else protocol)

    def _put_in_parts(self, path: str, views: list[memoryview], size: int) -> None:
        """One S3 multipart upload whose parts go up concurrently (at most :data:`MULTIPART_CONCURRENCY`).

        What ``aws s3 cp`` and boto3's transfer manager do for a large file; s3fs's own
        writer sends the parts of a file one after the other. A failure (of any part, or
        a cancellation) aborts the upload, so that no parts are left for S3 to bill.
        """
        from fsspec.asyn import sync

        part_bytes = max(MULTIPART_PART_BYTES, -(-size // MAX_PARTS))
        spans = [(n + 1, start, min(start + part_bytes, size)) for n, start in enumerate(range(0, size, part_bytes))]
        bucket, key, _ = self.fs.split_path(path)
        fs = self.fs

        def body(start: int, end: int) -> bytes:
            """Bytes ``[start, end)`` of the file, across the chunks it was given in."""
            out = bytearray()
            offset = 0
            for mv in views:
                lo, hi = max(start - offset, 0), min(end - offset, len(mv))
                if lo < hi:
                    out += mv[lo:hi]
                offset += len(mv)
                if offset >= end:
                    break
            return bytes(out)

        async def upload() -> None:
            created = await fs._call_s3("create_multipart_upload", Bucket=bucket, Key=key)
            upload_id = created["UploadId"]
            slots = asyncio.Semaphore(MULTIPART_CONCURRENCY)
            done: dict[int, str] = {}

            async def one(number: int, start: int, end: int) -> None:
                async with slots:  # the bytes of a part are made when it is sent: memory ~ concurrency x part
                    answer = await fs._call_s3(
                        "upload_part",
                        Bucket=bucket,
                        Key=key,
                        UploadId=upload_id,
                        PartNumber=number,
                        Body=body(start, end),
                    )
                done[number] = answer["ETag"]

            try:
                try:
                    async with asyncio.TaskGroup() as group:  # one part failing cancels the others
                        for number, start, end in spans:
                            group.create_task(one(number, start, end))
                except BaseExceptionGroup as failed:
                    raise failed.exceptions[0] from None  # the first failure, for the retry loop to judge
                await fs._call_s3(
                    "complete_multipart_upload",
                    Bucket=bucket,
                    Key=key,
                    UploadId=upload_id,
                    MultipartUpload={"Parts": [{"PartNumber": n, "ETag": done[n]} for n in sorted(done)]},
                )
            except BaseException:
                with contextlib.suppress(Exception):
                    await fs._call_s3("abort_multipart_upload", Bucket=bucket, Key=key, UploadId=upload_id)
                raise

        sync(fs.loop, upload)
        self._invalidate(path)

    def read_file(self, path: str, *, max_bytes: int | None = None) -> bytearray:
        """``fs.cat_file`` with retries and an optional size bound.

        A bounded read of a small file is one ranged GET of ``max_bytes + 1`` bytes
        (no separate size request); a larger bound asks for the size first, so that
        an oversized object is refused before it is downloaded. On S3 a bound of
        :data:`MULTIPART_THRESHOLD` or more reads the first :data:`MULTIPART_PART_BYTES`
        with one ranged GET (all of a smaller file: one request, as before), and the
        rest of a larger one with concurrent ranged GETs (:meth:`_get_in_parts`).
        """
        if max_bytes is not None and max_bytes >= MULTIPART_THRESHOLD and self._is_s3():
            bound = max_bytes
            return self._retry("Reading", path, lambda: self._get_in_parts(path, bound), nbytes=max_bytes)
        if max_bytes is not None and max_bytes <= RANGED_READ_LIMIT:
            data = self._retry("Reading", path, lambda: self._cat_range(path, 0, max_bytes + 1), nbytes=max_bytes)
            if len(data) > max_bytes:
                self._too_big(path, None, max_bytes)
            return bytearray(data)
        if max_bytes is not None:
            size = self.size(path)
            if size > max_bytes:
                self._too_big(path, size, max_bytes)
        data = self._retry("Reading", path, lambda: self.fs.cat_file(path), nbytes=max_bytes or 0)
        return bytearray(data)

    def _get_in_parts(self, path: str, max_bytes: int) -> bytearray:
        """The bytes of ``path`` (at most ``max_bytes``), a large object's with concurrent ranged GETs.

        What ``aws s3 cp`` and boto3's transfer manager do for a large object: ranges of
        :data:`MULTIPART_PART_BYTES`, :data:`MULTIPART_CONCURRENCY` in flight at once, each
        copied into its place in the one buffer returned as it arrives (s3fs's own read is
        one GET, whose bytes are then copied whole). The first range comes alone: a file
        shorter than it is read whole by it; a full one tells the object's size (its
        ``Content-Range``: refused over ``max_bytes`` before anything more is read), then
        the other ranges go together. One failing range cancels the others.

        The other ranges are pinned to the object the first one read: its version id in a
        versioned bucket (they read that version, whatever replaced it since), else its
        ETag (``If-Match``: S3 refuses them once the object was replaced). So a read never
        returns a mix of two versions: an object replaced meanwhile raises
        :class:`~cairn.storage.base.ObjectChangedError`.
        """
        from fsspec.asyn import sync

        version = self.fs.split_path(path)[2]

        async def download() -> bytearray:
            try:
                first, answer = await self._get_range(
                    path, 0, MULTIPART_PART_BYTES, {"VersionId": version} if version else {}
                )
            except OSError as err:
                # S3 answers 416 (s3fs: EINVAL) to a range that starts at or past the object's end: an
                # empty object. No bytes there; the caller's digest check says what that means.
                if err.errno != errno.EINVAL:
                    raise
                return bytearray()
            total = re.fullmatch(r"bytes \d+-\d+/(\d+)", str(answer.get("ContentRange") or ""))
            if total is None or len(first) > MULTIPART_PART_BYTES:
                # A store that ignores Range sent the whole object: it is all here, read once, not again per part.
                if len(first) > max_bytes:
                    self._too_big(path, len(first), max_bytes)
                return bytearray(first)
            size = int(total.group(1))
            if size <= len(first):
                return bytearray(first)  # the whole file, in one request
            if size > max_bytes:
                self._too_big(path, size, max_bytes)
            if len(first) < MULTIPART_PART_BYTES:
                raise self._changed(path, None)  # S3 sends a range whole: a short one is of an object cut meanwhile
            return await self._get_rest(path, first, size, self._pin(path, answer))

        result: bytearray = sync(self.fs.loop, download)
        return result

    async def _get_range(self, path: str, start: int, end: int, pin: dict[str, str]) -> tuple[bytes, dict[str, Any]]:
        """Bytes ``[start, end)`` of ``path`` and the response's headers (s3fs's ``_cat_file`` gives the bytes only)."""
        bucket, key, _ = self.fs.split_path(path)
        answer = await self.fs._call_s3("get_object", Bucket=bucket, Key=key, Range=f"bytes={start}-{end - 1}", **pin)
        try:
            data: bytes = await answer["Body"].read()
        finally:
            answer["Body"].close()
        return data, answer

    def _pin(self, path: str, answer: dict[str, Any]) -> dict[str, str]:
        """What pins the other ranges of a read to the object of its first range's ``answer``."""
        # "null" is the version id of an object written while versioning was off: a later write replaces it.
        version_id = str(answer.get("VersionId") or "")
        etag = str(answer.get("ETag") or "")
        if version_id and version_id != "null":
            return {"VersionId": version_id}
        if etag:
            return {"IfMatch": etag}
        raise CheckpointError(
            f"{self.uri(path)}: the store sent no ETag or version id with a part of the object, so "
            "its other parts cannot be read from the same version. Use an S3 store that sends ETags."
        )

    async def _get_rest(self, path: str, first: bytes, size: int, pin: dict[str, str]) -> bytearray:
        """The ``size`` bytes of ``path`` whose ``first`` range was read: the others concurrently, pinned by ``pin``."""
        part_bytes = max(MULTIPART_PART_BYTES, -(-size // MAX_PARTS))
        out = bytearray(size)  # the caller checked size against its bound
        view = memoryview(out)
        slots = asyncio.Semaphore(MULTIPART_CONCURRENCY)

        async def one(start: int, end: int) -> None:
            async with slots:  # memory: the buffer plus about concurrency x part in flight
                try:
                    data, _ = await self._get_range(path, start, end, pin)
                except OSError as err:
                    # 412 (If-Match failed) or 416 (a range past a shorter object's end): s3fs makes both
                    # EINVAL, and either means the object is not the one the first range read.
                    if err.errno != errno.EINVAL:
                        raise
                    raise self._changed(path, err) from None
            if len(data) != end - start:
                raise self._changed(path, None)
            view[start:end] = data

        try:
            view[: len(first)] = first
            try:
                async with asyncio.TaskGroup() as group:  # one range failing cancels the others
                    for start in range(MULTIPART_PART_BYTES, size, part_bytes):
                        group.create_task(one(start, min(start + part_bytes, size)))
            except BaseExceptionGroup as failed:
                raise failed.exceptions[0] from None  # the first failure, for the retry loop to judge
        finally:
            view.release()
        return out

    def _changed(self, path: str, err: BaseException | None) -> ObjectChangedError:
        """The error of a read whose object was replaced after its first range (``err``: S3's refusal)."""
        return ObjectChangedError(
            f"{self.uri(path)} changed while it was read: S3 refused a part of the object the read "
            f"started on ({err or 'a part came back short'}), so another writer replaced it meanwhile. "
            "No mix of the two was used; read it again once that writer is done (a checkpoint's "
            "restore does, when its checkpoint was replaced)."
        )

    def _too_big(self, path: str, size: int | None, max_bytes: int) -> None:
        from cairn.storage.base import FileTooLargeError

        what = f"{size} bytes" if size is not None else f"over {max_bytes} bytes"
        raise FileTooLargeError(
            f"{self.uri(path)} is {what}, over the limit of {max_bytes} for this kind "
            "of file; it is corrupt or hostile."
        )

    def read_range(self, path: str, start: int, end: int) -> bytes:
        """A ranged GET; no bytes for a range at or past the object's end, as a local file's read."""
        return bytes(
            self._retry("Reading", path, lambda: self._cat_range(path, start, end), nbytes=max(0, end - start))
        )

    def _cat_range(self, path: str, start: int, end: int) -> bytes:
        try:
            return bytes(self.fs.cat_file(path, start=start, end=end))
        except OSError as err:
            # S3 answers 416 "range not satisfiable" (s3fs: EINVAL) to a range that starts at or past the
            # object's end, an empty object's included: no bytes there, as a local file's read gives.
            if err.errno != errno.EINVAL:
                raise
            return b""

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
        until = self._end(monotonic() + self.deadline)
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
        """Claim ``final``; return where to write: beside it when a checkpoint is there, else ``final``.

        The owner record (``writers.INFLIGHT``) is the first object written, in ``final``:
        other writers leave the save alone while its heartbeat runs. When ``final`` holds a
        committed checkpoint, that checkpoint stays loadable until the new one commits: the
        new one is written to a hidden sibling (``writers.tmp_name``) and switched into place
        by :meth:`commit`. Otherwise (nothing there, or an uncommitted leftover) the save
        writes in place, after clearing the leftover; from then on no sub-folder loads on
        its own (:meth:`locate`). Refuses (before deleting anything) when ``final`` is a
        file, a folder holding files that are not a checkpoint's, or the place of another
        writer's save in flight.
        """
        # _kind, not fs.isfile: fsspec answers "no" to isfile on any error (a timeout, a 503), which
        # would spend a second deadline on an endpoint that already failed to answer.
        if self._kind(final) == "file":
            raise CheckpointError(f"Cannot save a checkpoint at {self.uri(final)}: a file is in the way.")
        existing = self._retry("Listing", final, lambda: self._find(final))
        foreign = next((p for p in existing if not replaceable_file(p.rstrip("/").rsplit("/", 1)[-1])), None)
        if foreign is not None:
            raise foreign_file_error(self.uri(final), self.uri(foreign))
        record = self.join(final, writers.INFLIGHT)
        if any(self._relative(final, p) == writers.INFLIGHT for p in existing):
            other = writers.Owner.from_bytes(self._read_many([record])[record])
            if other is not None and writers.gone_because(other, other.beat) is None:
                raise CheckpointError(
                    f"Cannot save a checkpoint at {self.uri(final)}: another save is writing there "
                    f"({other.describe()}, last heartbeat {max(0.0, time.time() - other.beat):.0f} s ago). "
                    "Two writers must not save to one path at the same time; wait for that save or save "
                    f"elsewhere. Once that writer is gone (no heartbeat for {writers.stale_after():.0f} s) a "
                    "save here takes its place over."
                )
            if other is not None and other.switching:
                self._finish_switch(final, other)  # it committed: finish its switch before replacing it
            else:
                self._delete(final, [record])  # its writer is gone: take the place over
        owner = writers.Owner.of_this_process(writers.new_write_id())
        self._create_record(record, owner)
        try:
            got = writers.Owner.from_bytes(self._read_many([record])[record])
            if got is None or got.id != owner.id:
                raise CheckpointError(
                    f"Cannot save a checkpoint at {self.uri(final)}: another save claimed the path at the same "
                    "moment. Two writers must not save to one path at the same time; save again or elsewhere."
                )
            manifest = self.join(final, MANIFEST)
            if self._read_many([manifest])[manifest] is not None:
                # A checkpoint is there: it stays as it is (loadable) until this save commits.
                staging = self._staging_of(final, owner.id)
                self._remove_save(staging)  # nothing is expected there (a random name): be sure
                self.makedirs(staging)
            else:
                staging = final
                self._invalidate(final)
                old = [p for p in self._retry("Listing", final, lambda: self._find(final)) if not self._same(p, record)]
                self._delete(final, old)
                if any("/" in self._relative(final, p) for p in old):
                    self._remove_empty_folders(final)
                self.makedirs(final)
        except BaseException:
            with contextlib.suppress(Exception):
                self._remove_own_record(record, owner)
            raise
        writers.claim(self.uri(staging), owner, lambda beat: self._beat(record, beat))
        return staging

    def _staging_of(self, final: str, write_id: str) -> str:
        """The hidden sibling where the save ``write_id`` writes a checkpoint that replaces ``final``."""
        parent, _, name = self._norm(final).rpartition("/")
        return self.join(parent, writers.tmp_name(name, write_id))

    def _target_of(self, staging: str) -> str | None:
        """The folder a staging sibling (:meth:`_staging_of`) replaces; None for a save in place."""
        parent, _, name = self._norm(staging).rpartition("/")
        parsed = writers.parse_tmp_name(name)
        if parsed is None or parsed.suffix or name != writers.tmp_name(parsed.target, parsed.id):
            return None
        return self.join(parent, parsed.target)

    def _record_of(self, staging: str) -> str:
        """The owner record of the save writing at ``staging``: in the folder it replaces, or in itself."""
        return self.join(self._target_of(staging) or staging, writers.INFLIGHT)

    def _finish_switch(self, final: str, owner: writers.Owner, *, until: float | None = None) -> None:
        """Copy the committed staging sibling of ``owner``'s save into ``final``, then remove it.

        The record at ``final`` says ``switching`` until the copy is whole, so that readers
        load the staging sibling meanwhile (:meth:`locate`); it is deleted after the root
        manifest, the staging sibling after that. Anyone may run it again after a crash.
        """
        staging = self._staging_of(final, owner.id)
        record = self.join(final, writers.INFLIGHT)
        self._invalidate(staging)
        self._invalidate(final)
        new = {self._relative(staging, p): p for p in self._retry("Listing", staging, lambda: self._find(staging))}
        if MANIFEST not in new:
            if self._read_many([self.join(final, MANIFEST)], until=until)[self.join(final, MANIFEST)] is not None:
                self._delete(final, [record], until=until)  # copied already (a crash after the root manifest)
                return
            raise CheckpointError(
                f"The save that replaced {self.uri(final)} ({owner.describe()}) committed, but its staging folder "
                f"{self.uri(staging)} has no root manifest: the store lost objects. Save again."
            )
        manifest = self.join(final, MANIFEST)
        old = [p for p in self._retry("Listing", final, lambda: self._find(final)) if not self._same(p, record)]
        if any(self._same(p, manifest) for p in old):
            self._delete(final, [manifest], until=until)
        stale = [p for p in old if self._relative(final, p) not in new and not self._same(p, manifest)]
        self._delete(final, stale, until=until)
        if any("/" in self._relative(final, p) for p in stale):
            self._remove_empty_folders(final, until=until)
        names = sorted(n for n in new if n != MANIFEST)
        if names:
            src = [new[n] for n in names]
            dst = [self.join(final, *n.split("/")) for n in names]
            self._retry("Copying", staging, lambda: self.fs.copy(src, dst), write=True, until=until)
        self._retry("Copying", staging, lambda: self.fs.copy(new[MANIFEST], manifest), write=True, until=until)
        self._delete(final, [record], until=until)
        self._invalidate(final)
        self._remove_save(staging, until=until)

    def _find(self, folder: str) -> list[str]:
        """Every file below ``folder`` (empty when it does not exist)."""
        try:
            found = self.fs.find(folder, detail=True)
        except FileNotFoundError:
            return []
        # s3fs answers an empty listing with the folder itself when objects appear under it
        # meanwhile (another writer): folders are never files of the folder.
        return [
            str(p)
            for p, info in found.items()
            if not str(p).endswith("/") and info.get("type") != "directory" and not self._same(str(p), folder)
        ]

    def _norm(self, path: str) -> str:
        return str(self.fs._strip_protocol(path)).rstrip("/")

    def _same(self, a: str, b: str) -> bool:
        return self._norm(a) == self._norm(b)

    def _relative(self, folder: str, path: str) -> str:
        """``path`` relative to ``folder`` (``/``-separated)."""
        return self._norm(path)[len(self._norm(folder)) + 1 :]

    def _delete(self, folder: str, paths: list[str], *, until: float | None = None) -> None:
        """Delete these objects (one bulk request where the store has them); missing ones are fine."""
        if not paths:
            return

        def rm() -> None:
            with contextlib.suppress(FileNotFoundError):
                self.fs.rm(paths)

        self._retry("Deleting", folder, rm, write=True, until=until)
        self._invalidate(folder)

    def _read_many(self, paths: list[str], *, until: float | None = None) -> dict[str, bytes | None]:
        """The first bytes of small objects (owner records, manifests): None for a missing one.

        All requested at once where the filesystem is asynchronous (s3fs): one round trip.
        An object that is there but cannot be read counts as there (``b""``).
        """
        from fsspec.asyn import AsyncFileSystem, sync

        end = writers.MAX_RECORD_BYTES + 1

        def once() -> dict[str, bytes | None]:
            results: list[Any]
            if isinstance(self.fs, AsyncFileSystem) and not self.fs.asynchronous:

                async def gather() -> list[Any]:
                    return await asyncio.gather(
                        *(self.fs._cat_file(p, start=0, end=end) for p in paths), return_exceptions=True
                    )

                results = sync(self.fs.loop, gather)
            else:
                results = []
                for p in paths:
                    try:
                        results.append(self.fs.cat_file(p, start=0, end=end))
                    except Exception as err:
                        if is_transient(err) or missing_credentials(err) is not None:
                            raise  # retry the batch (one backoff per failure); no credentials: say so
                        results.append(err)
            out: dict[str, bytes | None] = {}
            for p, r in zip(paths, results, strict=True):
                if isinstance(r, FileNotFoundError):
                    out[p] = None
                elif isinstance(r, BaseException):
                    if not isinstance(r, Exception) or is_transient(r) or missing_credentials(r) is not None:
                        raise r
                    out[p] = b""  # there, but not readable as a file
                else:
                    out[p] = bytes(r)
            return out

        for p in paths:
            self._invalidate(p)
        return self._retry("Checking", paths[0], once, until=until) if paths else {}

    def _create_record(self, record: str, owner: writers.Owner) -> None:
        """Write the owner record only if none is there (an atomic claim where the store has
        conditional writes: S3's If-None-Match, memory://); others overwrite, and the caller
        reads the record back to see whose it is."""
        data = owner.to_bytes()

        def create() -> None:
            try:
                self.fs.pipe_file(record, data, mode="create")
            except FileExistsError:
                pass  # another writer's claim, or our own first try of a retried request
            except TypeError:  # a filesystem without conditional writes
                with self.fs.open(record, "wb") as f:
                    f.write(data)

        self._retry("Writing", record, create, write=True)

    def _remove_own_record(self, record: str, owner: writers.Owner) -> None:
        """Delete the owner record at ``record`` if it is still ``owner``'s."""
        current = writers.Owner.from_bytes(self._read_many([record])[record])
        if current is not None and current.id == owner.id:
            self._delete(record.rsplit("/", 1)[0], [record])

    def _beat(self, record: str, owner: writers.Owner) -> bool:
        """A heartbeat: rewrite the owner record, unless it is gone or another save's now."""
        current = writers.Owner.from_bytes(self._read_many([record])[record])
        if current is None or current.id != owner.id:
            return False
        self.write_file(record, [owner.to_bytes()])
        return True

    def check_owned(self, staging: str, files: Collection[str] = ()) -> None:
        """The owner record still names this save and every file it wrote is there (one listing)."""
        claim = writers.current(self.uri(staging))
        record = self._record_of(staging)
        self._invalidate(staging)
        found = {self._relative(staging, p) for p in self._retry("Listing", staging, lambda: self._find(staging))}
        problem = ""
        if claim is not None and claim.lost:
            problem = "its heartbeat found its owner record gone"
        else:
            owner = writers.Owner.from_bytes(self._read_many([record])[record])
            if owner is None:
                problem = f"its owner record {self.uri(record)} is gone"
            elif claim is not None and owner.id != claim.owner.id:
                problem = f"its owner record {self.uri(record)} now names another save"
            else:
                missing = sorted(set(files) - found)
                if missing:
                    problem = f"{len(missing)} of its files are gone, {self.uri(self.join(staging, missing[0]))} first"
        if problem:
            raise CheckpointError(writers.lost_error(self.uri(staging), problem))
        if claim is not None:
            claim.checked = True

    def commit(self, staging: str, final: str) -> None:
        """The root manifest (written last by the engine) committed it; delete the owner record.

        A save over an existing checkpoint (``staging`` beside ``final``) commits by
        rewriting its owner record as ``switching`` (one atomic write: readers load the
        staging folder from then on), then copies the new checkpoint into ``final`` on the
        server side and removes the staging folder (:meth:`_finish_switch`). A save that
        did not call ``check_owned`` before its root manifest is checked here: if its owner
        record is no longer its own, the root manifest is deleted again and the save fails.
        """
        # Kept in flight until the switch is done: a cleanup in this process (another thread's manager
        # on the root) would take the switch for that of an ended save, and finish it under this one.
        claim = writers.release(self.uri(staging), keep_live=True)
        try:
            self._commit(staging, final, claim)
        finally:
            if claim is not None:
                writers.ended(claim.owner.id)

    def _commit(self, staging: str, final: str, claim: writers.Claim | None) -> None:
        """:meth:`commit` once the heartbeat of ``claim`` (the save's, if this process holds it) stopped."""
        record = self._record_of(staging)
        owner = writers.Owner.from_bytes(self._read_many([record])[record])
        if claim is not None and (claim.lost or owner is None or owner.id != claim.owner.id):
            with contextlib.suppress(Exception):
                self.remove(self.join(staging, MANIFEST))
            raise CheckpointError(writers.lost_error(self.uri(staging), "its owner record is gone"))
        if self._same(staging, final):
            self._delete(staging, [record])
            self._invalidate(final)
            return
        mine = claim.owner if claim is not None else owner
        if mine is None:
            raise CheckpointError(writers.lost_error(self.uri(staging), "its owner record is gone"))
        switching = replace(mine.beating(), switching=True)
        self._retry("Writing", record, lambda: self.fs.pipe_file(record, switching.to_bytes()), write=True)
        try:
            self._finish_switch(final, switching)
        except CheckpointError as err:
            raise CheckpointError(
                f"The checkpoint saved over {self.uri(final)} is committed (readers load it from "
                f"{self.uri(staging)}), but copying it into place did not finish: {err} The next save at this "
                "path, or a CheckpointManager's cleanup, finishes the copy."
            ) from err

    def abort(self, staging: str, final: str) -> None:
        """Remove the partial files and unfinished uploads (the owner record last), unless another
        writer took the place over or the save already committed (a switch in progress)."""
        claim = writers.release(self.uri(staging))
        # The cleanup after a failed save is bounded with the save (a bounded view's end); once that
        # has passed, the uncommitted files are left for the next save's remove_leftovers.
        until = self._end(monotonic() + self.deadline)
        if until <= monotonic():
            return
        with contextlib.suppress(Exception):
            record = self._record_of(staging)
            owner = writers.Owner.from_bytes(self._read_many([record], until=until)[record])
            if owner is not None and claim is not None and owner.id != claim.owner.id:
                return  # another writer's save now: not ours to delete
            if owner is not None and owner.switching:
                return  # committed: readers load the staging folder until the switch is finished
            self._remove_save(staging, until=until)
            self._abort_uploads(staging, lambda key: False, until=until)
            if not self._same(staging, final) and owner is not None:
                self._delete(final, [record], until=until)  # the old checkpoint stays, as it was

    def _remove_save(self, folder: str, *, until: float | None = None) -> None:
        """Delete a folder's root manifest, then everything but its owner record, then the record.

        The record goes last so that no sub-folder loads on its own while the rest goes.
        """
        record = self.join(folder, writers.INFLIGHT)
        manifest = self.join(folder, MANIFEST)
        self._invalidate(folder)
        files = self._retry("Listing", folder, lambda: self._find(folder), until=until)
        if any(self._same(p, manifest) for p in files):
            self._delete(folder, [manifest], until=until)
        rest = [p for p in files if not self._same(p, record) and not self._same(p, manifest)]
        self._delete(folder, rest, until=until)
        if any(self._same(p, record) for p in files):
            self._delete(folder, [record], until=until)
        self._remove_empty_folders(folder, itself=True, until=until)

    def _abort_uploads(self, folder: str, keep: Callable[[str], bool], *, until: float | None = None) -> list[str]:
        """Abort the unfinished multipart uploads below ``folder`` (S3) whose key ``keep`` does not keep.

        A process killed during a large upload leaves one behind; S3 keeps (and bills) its
        parts until it is aborted. ``keep`` gets the key relative to ``folder``. Listed a
        page (1000 uploads) at a time, at most :data:`MAX_UPLOAD_PAGES` pages per call; what
        is left is aborted by the next cleanup. Returns the keys aborted (relative).
        """
        call = getattr(self.fs, "call_s3", None)
        protocol = getattr(self.fs, "protocol", ())
        if call is None or "s3" not in ((protocol,) if isinstance(protocol, str) else protocol):
            return []
        bucket, _, key = self._norm(folder).partition("/")
        prefix = key.rstrip("/") + "/" if key else ""
        aborted: list[str] = []
        markers: dict[str, str] = {}
        for _ in range(MAX_UPLOAD_PAGES):
            args = {"Bucket": bucket, "Prefix": prefix, **markers}

            def listing(a: dict[str, str] = args) -> dict[str, Any]:
                return dict(call("list_multipart_uploads", **a))

            page = self._retry("Listing the uploads of", folder, listing, until=until)
            for upload in page.get("Uploads") or []:
                name, upload_id = str(upload.get("Key", "")), str(upload.get("UploadId", ""))
                if not name.startswith(prefix) or keep(name[len(prefix) :]):
                    continue

                def abort(name: str = name, upload_id: str = upload_id) -> None:
                    with contextlib.suppress(FileNotFoundError):  # finished or aborted meanwhile
                        call("abort_multipart_upload", Bucket=bucket, Key=name, UploadId=upload_id)

                self._retry("Aborting an upload to", f"{bucket}/{name}", abort, write=True, until=until)
                aborted.append(name[len(prefix) :])
            if not page.get("IsTruncated"):
                break
            markers = {"KeyMarker": page.get("NextKeyMarker", ""), "UploadIdMarker": page.get("NextUploadIdMarker", "")}
        return aborted

    def _remove_empty_folders(self, folder: str, *, itself: bool = False, until: float | None = None) -> None:
        """Remove the folders that filesystems with real folders (memory://) keep once emptied.

        One listing; object stores have none left once their objects are gone.
        """

        def rm() -> None:
            try:
                entries = self.fs.find(folder, withdirs=True, detail=True)
            except FileNotFoundError:
                return
            dirs = [str(p) for p, info in entries.items() if info.get("type") == "directory"]
            dirs = sorted((d for d in dirs if not self._same(d, folder)), key=len, reverse=True)
            if itself and self._retry_free_isdir(folder):
                dirs.append(folder)
            for d in dirs:
                if "/" not in self._norm(d).strip("/"):
                    continue  # a bucket (s3fs's rmdir deletes buckets): never ours to remove
                with contextlib.suppress(FileNotFoundError, OSError):
                    self.fs.rmdir(d)

        self._invalidate(folder)
        self._retry("Deleting", folder, rm, write=True, until=until)
        self._invalidate(folder)

    def _retry_free_isdir(self, path: str) -> bool:
        try:
            return bool(self.fs.isdir(path))
        except FileNotFoundError:
            return False

    def remove_leftovers(self, root: str, is_target: Callable[[str], bool]) -> list[str]:
        """Clean up what interrupted saves left under ``root`` once their writers are gone.

        * a target folder without a root manifest (a save in place that never committed),
        * a staging sibling (``.{target}.cairn-tmp-{id}``) whose save is not the one in flight
          at its target,
        * a committed switch whose writer died before it was finished: finished (copied into
          place), never deleted,
        * on S3, unfinished multipart uploads below any of these, or below a target no live
          save writes to.
        """
        names = self.listdir(root)
        staged = {}
        for n in names:
            parsed = writers.parse_tmp_name(n)
            if parsed is not None and self._target_of(self.join(root, n)) is not None and is_target(parsed.target):
                staged[n] = parsed
        targets = sorted({n for n in names if is_target(n)} | {p.target for p in staged.values()})
        if not targets:
            return []
        until = self._end(monotonic() + self.deadline)
        folders = {n: self.join(root, n) for n in targets}
        probes = self._read_many(
            [self.join(f, MANIFEST) for f in folders.values()]
            + [self.join(f, writers.INFLIGHT) for f in folders.values()],
            until=until,
        )
        removed = []
        live: dict[str, str] = {}  # target -> the id of the save in flight there
        for name, folder in folders.items():
            record = self.join(folder, writers.INFLIGHT)
            data = probes[record]
            owner = writers.Owner.from_bytes(data) if data is not None else None
            gone = data is None or writers.gone_because(owner, owner.beat if owner is not None else None) is not None
            if owner is not None and not gone:
                live[name] = owner.id
            if probes[self.join(folder, MANIFEST)] is not None or (owner is not None and owner.switching):
                if owner is not None and owner.switching and gone:
                    self._finish_switch(folder, owner, until=until)
                    staged.pop(writers.tmp_name(name, owner.id), None)
                elif data is not None and gone:
                    self._delete(folder, [record], until=until)  # the record of a dead save beside it
                continue  # committed (damaged or not): never a leftover
            if data is not None and not gone:
                continue  # a save in flight: never another writer's to delete
            if name in names:
                self._remove_save(folder, until=until)
                removed.append(name)
        for n, parsed in staged.items():
            if live.get(parsed.target) != parsed.id:
                self._remove_save(self.join(root, n), until=until)
                removed.append(n)

        def keep(key: str) -> bool:
            top = key.split("/", 1)[0]
            parsed = staged.get(top)
            if parsed is not None:
                return live.get(parsed.target) == parsed.id
            return top in live or top not in folders  # an upload to a target with no live save is orphaned

        self._abort_uploads(root, keep, until=until)
        return removed

    def locate(self, path: str) -> str:
        """Where the committed checkpoint named ``path`` is read from; refuse one inside an uncommitted save.

        Every folder above ``path`` (and ``path`` itself) is checked for an owner record,
        in one batch of requests (one per folder; a path deeper than
        ``writers.MAX_FOLDER_DEPTH`` folders is refused). A folder with a record and no
        root manifest is a save in flight that has not committed: ``path`` below it does
        not load. A record that says ``switching`` is a save over an existing checkpoint
        that committed and is being copied into place: ``path`` is read from its staging
        folder meanwhile. A path that names a staging folder itself is refused.
        """
        folders = self._folders_of(path)
        if not folders:
            return path
        return self._resolve(path, folders, self._read_many([self.join(f, writers.INFLIGHT) for f in folders]))

    def locator(self, root: str) -> Callable[[str], str]:
        """:meth:`locate` for the paths of one listing under ``root``, each folder's record read once.

        The folders of ``root`` and above are checked at the first call; when none holds a
        record (the rule), each path then costs the records of its own folders below
        ``root`` only (one request for a manager's step), not one per folder of its depth.
        When one does, or for a path outside ``root``, each call is a :meth:`locate`.
        """
        base = self._norm(root)
        clear: list[bool] = []  # whether no folder of root and above holds a record, found at the first call

        def locate(path: str) -> str:
            if not self._norm(path).startswith(base + "/"):
                return self.locate(path)
            if not clear:
                try:
                    above = self._folders_of(root)
                except CheckpointError:
                    above = None  # refused as a path: each call's locate says so, naming its own path
                records = self._read_many([self.join(f, writers.INFLIGHT) for f in above]) if above else {}
                clear.append(above is not None and all(r is None for r in records.values()))
            if not clear[0]:
                return self.locate(path)
            below = [f for f in self._folders_of(path) if len(f) > len(base)]  # its folders are prefixes of it
            if not below:
                return path
            return self._resolve(path, below, self._read_many([self.join(f, writers.INFLIGHT) for f in below]))

        return locate

    def _folders_of(self, path: str) -> list[str]:
        """The folders :meth:`locate` checks for ``path``, innermost first; refuse a path too deep or staged."""
        parts = self._norm(path).split("/")
        if len(parts) > writers.MAX_FOLDER_DEPTH:
            raise CheckpointError(
                f"Cannot open {self.uri(path)}: it lies {len(parts)} folders deep, over the {writers.MAX_FOLDER_DEPTH} "
                "a checkpoint on an object store may (S3 keys are at most 1024 bytes). Use a shorter path."
            )
        for i, part in enumerate(parts):
            if i and self._target_of("/".join(parts[: i + 1])) is not None:
                raise CheckpointNotFoundError(
                    f"No committed checkpoint at {self.uri(path)}: {part} is the staging folder of a save, "
                    f"not a checkpoint. Load {self.uri('/'.join([*parts[:i], writers.parse_tmp_name(part).target]))}"  # type: ignore[union-attr]
                    " instead."
                )
        folders = ["/".join(parts[:i]) for i in range(len(parts), 0, -1)]
        return [f for f in folders if f.strip("/") and "/" in f.strip("/")]  # never a bucket alone

    def _resolve(self, path: str, folders: list[str], records: dict[str, bytes | None]) -> str:
        """:meth:`locate`'s answer from the owner records of ``folders`` (innermost first) as read."""
        held = [f for f in folders if records[self.join(f, writers.INFLIGHT)] is not None]
        if not held:
            return path
        manifests = self._read_many([self.join(f, MANIFEST) for f in held])
        where = path
        for folder in reversed(held):  # the outermost first: a switch there decides where the rest is read
            owner = writers.Owner.from_bytes(records[self.join(folder, writers.INFLIGHT)])
            if owner is not None and owner.switching:
                staging = self._staging_of(folder, owner.id)
                if self._read_many([self.join(staging, MANIFEST)])[self.join(staging, MANIFEST)] is not None:
                    where = staging + self._norm(path)[len(folder) :]
                    break
                continue  # copied into place already: the folder's own files are read
            if manifests[self.join(folder, MANIFEST)] is not None or self._same(folder, path):
                # Committed (the record is that of a save beside it, or a leftover of a save killed just after
                # its commit); or the path itself, whose reader waits a little for a save in flight to commit.
                continue
            raise CheckpointNotFoundError(
                f"No committed checkpoint at {self.uri(path)}: it belongs to the save at {self.uri(folder)}, "
                "which has not committed (it is still being written, or it was interrupted). Load it once "
                "that save has committed, or load another checkpoint."
            )
        return where

    def check_committed(self, path: str) -> None:
        """Raise ``CheckpointNotFoundError`` if ``path`` lies inside an uncommitted save (see :meth:`locate`)."""
        self.locate(path)

    def link_or_copy(self, src: str, dst: str) -> None:
        """A server-side copy, with time for its bytes (a large object copies for a while)."""
        size = self.size(src)
        self._retry("Copying", src, lambda: self.fs.copy(src, dst), write=True, nbytes=size)

"""Reading tensor files: verified in memory, or verified by streaming and read in place.

Two sources of arrays for the decoder:

* :class:`MemoryTensorFile`: the whole file, already read and verified; arrays
  are views of its buffer. Used for object stores, where a ranged read per
  tensor would cost a round trip each.
* :class:`StreamedTensorFile`: a local file. Opening it checks only its size
  and header. Decoding then *plans* where each tensor goes: a live buffer the
  component offers (``Checkpointable.get_state_buffers``) when dtype and shape
  match, else a fresh, uninitialized array. :meth:`~StreamedTensorFile.read_all`
  fills them with ``preadv`` and computes the file's digest (BLAKE3 or SHA-256) over the same
  bytes in a helper thread (both release the GIL): one pass over the file.

  A file any of whose tensors land in live buffers is verified first, by
  :meth:`~StreamedTensorFile.verify` (a streamed digest through two reused 16 MB
  buffers), before any file of the restore is read into place: a damaged file
  never touches live state. Files read only into fresh arrays need no such
  pass: nothing is applied before every file of the restore has passed its
  check in ``read_all``. Either way the state is never held twice in memory.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from cairn._crc import hash_pool, hash_pool_2, read_pool
from cairn.codec.tensors import NUMPY_TO_ST, TensorRecord, parse_header
from cairn.errors import CorruptCheckpointError
from cairn.manifest import Digest, Hasher

if TYPE_CHECKING:
    from cairn.manifest import FileEntry

CHUNK = 16 << 20
MAX_NDIM = 64  # numpy's limit; a longer shape in a file is refused before numpy sees it
_local = threading.local()
_pool = hash_pool


def _chunk_buffers() -> list[memoryview]:
    # Reused per thread (the caller's and the reader thread's: 32 MB each, kept): fresh memory costs
    # page faults, several times slower than a copy.
    bufs: list[memoryview] | None = getattr(_local, "bufs", None)
    if bufs is None:
        bufs = [memoryview(bytearray(CHUNK)), memoryview(bytearray(CHUNK))]
        _local.bufs = bufs
    return bufs


class SizedView:
    """A header buffer that reports the whole file's length (for header-only parsing)."""

    def __init__(self, data: bytes, size: int) -> None:
        self.data = data
        self.size = size

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, item: slice) -> bytes:
        return self.data[item]


def check_ref(
    records: dict[str, TensorRecord], where: str, name: str, kind: int, dtype: Any, shape: list[int]
) -> tuple[TensorRecord, Any]:
    """Check an array reference of the skeleton against the file's header.

    Returns:
        The record and the array's dtype (a numpy dtype, or a torch dtype).
    """
    from cairn.codec.state import KIND_NUMPY, TORCH_TO_ST, numpy_dtype_from_descr

    rec = records.get(name)
    if rec is None:
        raise CorruptCheckpointError(f"{where} has no tensor {name!r}, which the state refers to.")
    if len(shape) > MAX_NDIM or not all(type(d) is int and d >= 0 for d in shape):
        raise CorruptCheckpointError(f"{where}: tensor {name!r} has an invalid shape {shape!r}.")
    # Python ints: numpy's int64 product wraps around (2**62 * 4 == 0), which would let a
    # hostile shape pass the size check below and reach the allocator.
    count = 1
    for d in shape:
        count *= d
    out_dtype: Any
    if kind == KIND_NUMPY:
        np_dtype = numpy_dtype_from_descr(dtype, where=where)
        st = NUMPY_TO_ST.get(np_dtype.name) if np_dtype.isnative else None
        nbytes, out_dtype = count * np_dtype.itemsize, np_dtype
    else:
        import torch

        # vars(), not getattr(): torch's module __getattr__ imports submodules (``_dynamo``, ``onnx``)
        # on first access, and a name read from a file must never trigger an import.
        t_dtype = vars(torch).get(dtype) if isinstance(dtype, str) else None
        if not isinstance(t_dtype, torch.dtype):
            raise CorruptCheckpointError(f"{where}: tensor {name!r} has unknown torch dtype {dtype!r}.")
        st, nbytes, out_dtype = TORCH_TO_ST.get(dtype), count * t_dtype.itemsize, t_dtype
    if rec.end - rec.begin != nbytes:
        raise CorruptCheckpointError(
            f"{where}: tensor {name!r} holds {rec.end - rec.begin} bytes but its recorded dtype and shape "
            f"need {nbytes}."
        )
    if st is not None and (rec.st_dtype != st or list(rec.shape) != list(shape)):
        raise CorruptCheckpointError(
            f"{where}: tensor {name!r} is {rec.st_dtype}{list(rec.shape)} in the file but {st}{list(shape)} "
            "in the state."
        )
    return rec, out_dtype


class MemoryTensorFile:
    """A verified safetensors file in memory; arrays are views of its buffer."""

    def __init__(self, data: bytearray, where: str) -> None:
        """Parse the header of verified ``data``."""
        self.data = data
        self.where = where
        self.verified = True
        self.live = False  # arrays are views of the buffer, never a caller's live buffers
        self.records, _ = parse_header(memoryview(data), where=where)

    def verify(self) -> None:
        """Nothing to do: the buffer was verified when it was read."""

    def get(self, name: str, kind: int, dtype: Any, shape: list[int], dest: Any = None) -> Any:
        """The array ``name`` as a view of the buffer (``dest`` is not used here)."""
        import numpy as np

        from cairn.codec.state import KIND_NUMPY

        rec, out_dtype = check_ref(self.records, self.where, name, kind, dtype, shape)
        nbytes = rec.end - rec.begin
        if kind == KIND_NUMPY:
            if nbytes == 0:
                return np.empty(shape, dtype=out_dtype)
            return (
                np.frombuffer(self.data, dtype=np.uint8, count=nbytes, offset=rec.begin).view(out_dtype).reshape(shape)
            )
        import torch

        if nbytes == 0:
            return torch.empty(shape, dtype=out_dtype)
        raw = torch.frombuffer(self.data, dtype=torch.uint8, count=nbytes, offset=rec.begin)
        try:
            return raw.view(out_dtype).reshape(shape)
        except RuntimeError:
            # An unaligned offset (files written by other tools): copy, then reinterpret.
            return raw.clone().view(out_dtype).reshape(shape)

    def forget_plan(self) -> None:
        """Nothing planned: arrays are views of the buffer."""

    def read_all(self) -> None:
        """Nothing to do: the arrays are views of the verified buffer."""

    def close(self) -> None:
        """Nothing to release."""


def _byte_view(value: Any, kind: int, out_dtype: Any, shape: list[int]) -> memoryview | None:
    """A writable byte view of ``value`` when it can receive this array as it is, else None."""
    import numpy as np

    from cairn.codec.state import KIND_NUMPY

    if kind == KIND_NUMPY:
        if (
            not isinstance(value, np.ndarray)
            or value.dtype != out_dtype
            or list(value.shape) != list(shape)
            or not value.flags.c_contiguous
            or not value.flags.writeable
            or value.size == 0
        ):
            return None
        return memoryview(value.reshape(-1).view(np.uint8).data)
    torch = sys.modules.get("torch")
    if (
        torch is None
        or not isinstance(value, torch.Tensor)
        or value.dtype != out_dtype
        or list(value.shape) != list(shape)
        or value.device.type != "cpu"
        or not value.is_contiguous()
        or value.requires_grad
        or value.numel() == 0
    ):
        return None
    return memoryview(value.reshape(-1).view(torch.uint8).numpy().data)


def same_layout(value: Any, dest: Any) -> bool:
    """Whether ``value`` (an array decoded from a file) has the type, dtype and shape of the live ``dest``."""
    import numpy as np

    if isinstance(value, np.ndarray):
        return isinstance(dest, np.ndarray) and value.dtype == dest.dtype and value.shape == dest.shape
    torch = sys.modules.get("torch")
    return (
        torch is not None
        and isinstance(value, torch.Tensor)
        and isinstance(dest, torch.Tensor)
        and value.dtype == dest.dtype
        and tuple(value.shape) == tuple(dest.shape)
    )


def _fresh(kind: int, out_dtype: Any, shape: list[int]) -> tuple[Any, memoryview | None]:
    import numpy as np

    from cairn.codec.state import KIND_NUMPY

    if kind == KIND_NUMPY:
        a = np.empty(shape, out_dtype)
        return a, (memoryview(a.reshape(-1).view(np.uint8).data) if a.size else None)
    import torch

    t = torch.empty(shape, dtype=out_dtype)
    return t, (memoryview(t.reshape(-1).view(torch.uint8).numpy().data) if t.numel() else None)


class ChangedInPlaceError(CorruptCheckpointError):
    """A file that passed its checksum changed before, or while, its bytes were read into live buffers.

    Some live values may already hold the changed bytes, so the read is not retried
    (``read_consistently``): a retry could only fail at its verifying pass and hide
    that the object was touched. cairn never changes a committed file in place; a
    concurrent save replaces whole folders, which an open file does not see.
    """


class StreamedTensorFile:
    """A local tensor file, verified by streaming; tensors are read into their destinations later."""

    def __init__(self, fd: int, entry: FileEntry, where: str) -> None:
        """Check the open file ``fd``'s size and header against its manifest ``entry``; the fd is owned from here on.

        The digest is checked by :meth:`verify` (a pass of its own, for files read
        into live buffers) or by :meth:`read_all` (in the pass that fills the tensors).

        Raises:
            CorruptCheckpointError: Wrong size or a malformed header.
        """
        self.fd = fd
        self.where = where
        self.verified = False
        self.live = False  # whether some tensor is read into a buffer the caller already had
        self.jobs: list[tuple[memoryview, int]] = []
        try:
            self._open(entry)
        except BaseException:
            self.close()
            raise

    def _open(self, entry: FileEntry) -> None:
        st = os.fstat(self.fd)
        size = st.st_size
        self.size, self.digest = size, entry.digest
        # Taken before any byte is read: any write to the file after it (or os.utime) changes the
        # ctime. "Settled": its last change lies its filesystem's settle time back (a few clock ticks
        # on a local disk, else 2 s: cairn.storage.local._settle_ns), so a write now lands in another
        # tick (git's racy stamps); an unsettled file is hashed again by the second pass.
        from cairn.storage import local

        self.stamp = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        self.settled = max(st.st_mtime_ns, st.st_ctime_ns) < time.time_ns() - local._settle_ns(st)
        if size != entry.size:
            raise CorruptCheckpointError(
                f"{self.where} is {size} bytes but the manifest records {entry.size}; the file is truncated "
                "or was changed after the save. Restore it from a good copy."
            )
        if hasattr(os, "posix_fadvise"):
            os.posix_fadvise(self.fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)
        head = os.pread(self.fd, 8, 0)
        n = int.from_bytes(head, "little") if len(head) == 8 else 0
        header = os.pread(self.fd, 8 + min(n, size), 0)
        self.records, _ = parse_header(SizedView(header, size), where=self.where)  # type: ignore[arg-type]

    def verify(self, *, hash_here: bool = False) -> None:
        """Stream the whole file once and check its digest (a pass before any byte is put in place).

        The digest of each buffer runs in the helper thread while the next one is read;
        with ``hash_here``, in this thread (the reader thread: see :func:`read_pool`).

        Raises:
            CorruptCheckpointError: The file fails its checksum.
        """
        off, digest = digest_fd(self.fd, self.size, self.digest.algorithm, hash_here=hash_here)
        size = self.size
        if off != size or digest != self.digest:
            raise CorruptCheckpointError(
                f"{self.where} fails its checksum ({digest}, manifest says {self.digest}): the file "
                "is corrupted. Restore it from a good copy."
            )
        self.verified = True

    def get(self, name: str, kind: int, dtype: Any, shape: list[int], dest: Any = None) -> Any:
        """Plan the read of ``name`` into ``dest`` (when it fits) or a fresh array; return that array."""
        rec, out_dtype = check_ref(self.records, self.where, name, kind, dtype, shape)
        view = _byte_view(dest, kind, out_dtype, shape) if dest is not None else None
        if view is not None:
            value = dest
            self.live = True
        else:
            value, view = _fresh(kind, out_dtype, shape)
        if view is not None:
            self.jobs.append((view, rec.begin))
        return value

    def forget_plan(self) -> None:
        """Drop every planned destination (the state is decoded again, into fresh arrays)."""
        self.jobs, self.live = [], False

    def read_all(self) -> None:
        """Fill every planned destination, computing the file's digest over the bytes as they are read.

        See :func:`read_files` (this file alone).

        Raises:
            CorruptCheckpointError: The bytes read do not match the manifest's digest.
        """
        read_files([self])

    def _pieces(self) -> list[_Piece]:
        """The file's bytes in order, as pieces of at most :data:`CHUNK` bytes: planned destinations and gaps."""
        jobs, self.jobs = sorted(self.jobs, key=lambda j: j[1]), []
        pieces: list[_Piece] = []
        pos = 0
        for view, offset in [*jobs, (memoryview(b""), self.size)]:
            # The header, and any bytes nothing refers to (a hostile file may hold gigabytes of
            # them): read into memory, so in pieces of at most CHUNK, each freed once checksummed.
            for at in range(pos, offset, CHUNK):
                pieces.append(_Piece(self, at, None, min(CHUNK, offset - at)))
            for at in range(0, len(view), CHUNK):
                piece = view[at : at + CHUNK]
                pieces.append(_Piece(self, offset + at, piece, len(piece)))
            pos = max(pos, offset + len(view))
        return pieces

    def _check_digest(self, digest: Digest) -> None:
        """Close the file and compare the digest of the bytes read with the manifest's."""
        self.close()
        if digest != self.digest and not self.verified:
            raise CorruptCheckpointError(
                f"{self.where} fails its checksum ({digest}, manifest says {self.digest}): the file "
                "is corrupted. Restore it from a good copy."
            )
        if digest != self.digest:
            raise ChangedInPlaceError(
                f"{self.where} changed while it was being restored ({digest}, manifest says "
                f"{self.digest}), after it had passed its checksum: some values of the object restored in place "
                "may come from the changed file. Nothing of cairn changes a committed file; find what writes "
                "into the checkpoint, then restore again from a checkpoint nothing is writing to."
            )

    def _unchanged_since_open(self) -> bool:
        """Whether the open file's stamp (identity, size, mtime, ctime) is still the one taken at open."""
        st = os.fstat(self.fd)
        return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns) == self.stamp

    def _check_second_pass(self) -> None:
        """Close the file, refusing it if it changed since the first pass verified it (by its stamp)."""
        try:
            unchanged = self._unchanged_since_open()
        finally:
            self.close()
        if not unchanged:
            raise ChangedInPlaceError(
                f"{self.where} changed while it was being restored (its size, mtime or ctime moved), after it "
                "had passed its checksum: some values of the object restored in place may come from the changed "
                "file. Nothing of cairn changes a committed file; find what writes into the checkpoint, then "
                "restore again from a checkpoint nothing is writing to."
            )

    def _shortened(self) -> CorruptCheckpointError:
        """The error for a file found shorter than its manifest says while its tensors are read."""
        if not self.verified:
            return CorruptCheckpointError(f"{self.where} became shorter while it was being restored.")
        return ChangedInPlaceError(
            f"{self.where} became shorter while it was being restored, after it had passed its checksum: some "
            "values of the object restored in place may come from the changed file. Nothing of cairn changes a "
            "committed file; find what writes into the checkpoint, then restore again from a checkpoint nothing "
            "is writing to."
        )

    def close(self) -> None:
        """Close the file."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def digest_fd(fd: int, size: int, algorithm: str, *, hash_here: bool = False) -> tuple[int, Digest]:
    """Stream the first ``size`` bytes of the open file ``fd`` once: ``(bytes read, their digest)``.

    Through two reused :data:`CHUNK` buffers; each buffer's digest runs in the helper thread
    while the next one is read (with ``hash_here``, in this thread: see :func:`read_pool`).
    """
    bufs = _chunk_buffers()
    hasher = Hasher(algorithm)
    hash_of = hasher.update
    pool = _pool()
    off, i, pending = 0, 0, None
    while off < size:
        mv = bufs[i % 2]
        n = os.preadv(fd, [mv[: min(CHUNK, size - off)]], off)
        if n == 0:
            break
        if hash_here:
            hash_of(mv[:n])
        else:
            if pending is not None:
                pending.result()  # the digest of the other buffer is done: it may be reused next
            pending = pool.submit(hash_of, mv[:n])
        off += n
        i += 1
    if pending is not None:
        pending.result()
    return off, hasher.digest()


def crc_fd(fd: int, size: int) -> tuple[int, int]:
    """Stream the first ``size`` bytes of the open file ``fd`` once: ``(bytes read, their CRC-32)``."""
    from cairn._crc import crc32

    buf = _chunk_buffers()[0]
    off, crc = 0, 0
    while off < size:
        n = os.preadv(fd, [buf[: min(CHUNK, size - off)]], off)
        if n == 0:
            break
        crc = crc32(buf[:n], crc)
        off += n
    return off, crc


PARALLEL_MIN = 64 << 20
"""A :func:`read_files` call that reads at least this many bytes splits them between two threads."""

GAP_PIECES = 4
"""Pieces of bytes nothing refers to that one reader holds before the hash has taken them.

They are read into memory (``bytes``), and a reader runs ahead of the hash: without a bound,
a file whose bytes are mostly such gaps (a hostile one, with a SHA-256 manifest the reader
outruns) would be held in memory nearly whole. At most this many :data:`CHUNK` pieces per
reader, 64 MB each with the defaults, then the reader waits for the hash.
"""


class _Stopped(Exception):
    """The other reader failed; this one stops early."""


@dataclass(eq=False)
class _Piece:
    """A contiguous range of a tensor file: read into ``view`` (a destination) or, for a gap, into ``data``."""

    source: StreamedTensorFile
    offset: int
    view: memoryview | None
    length: int
    data: bytes | None = None
    error: BaseException | None = None
    ready: threading.Event = field(default_factory=threading.Event)
    slots: threading.Semaphore | None = None  # the reader's GAP_PIECES budget this piece's data holds


def _read_pieces(pieces: list[_Piece], stop: threading.Event) -> None:
    """Read each piece in order, marking it ready; after a failure mark the rest failed (no waiter hangs).

    A gap (bytes read into memory) takes one of this reader's :data:`GAP_PIECES` slots,
    which the hash gives back once it has taken the bytes.
    """
    slots = threading.Semaphore(GAP_PIECES)
    for i, p in enumerate(pieces):
        try:
            if stop.is_set():
                raise _Stopped
            fd = p.source.fd
            if p.view is None:
                while not slots.acquire(timeout=0.05):
                    if stop.is_set():  # the hash or the other reader failed: no slot will come back
                        raise _Stopped
                p.slots = slots
                data = os.pread(fd, p.length, p.offset)
                if len(data) != p.length:
                    raise p.source._shortened()
                p.data = data
            else:
                got = 0
                while got < p.length:
                    n = os.preadv(fd, [p.view[got:]], p.offset + got)
                    if n == 0:
                        raise p.source._shortened()
                    got += n
        except BaseException as err:
            stop.set()
            for q in pieces[i:]:
                q.error = err if q is p else _Stopped()
                q.ready.set()
            raise
        p.ready.set()


def _hash_pieces(pieces: list[_Piece], stop: threading.Event) -> dict[StreamedTensorFile, Digest]:
    """The digest of each file over its pieces, in file order, each once it is read.

    A gap's slot goes back to its reader once hashed; if the hash fails, ``stop`` tells
    the readers, so that none waits for a slot forever.
    """
    hashers: dict[StreamedTensorFile, Hasher] = {}
    try:
        for p in pieces:
            p.ready.wait()
            if p.error is not None:
                return {}  # the reader that failed reports it
            data = p.view if p.data is None else p.data
            hasher = hashers.get(p.source)
            if hasher is None:
                hasher = hashers[p.source] = Hasher(p.source.digest.algorithm)
            if data is not None:  # a piece is a destination view or, for a gap, the bytes read
                hasher.update(data)
            p.data = None
            if p.slots is not None:
                p.slots.release()
                p.slots = None
    except BaseException:
        stop.set()
        raise
    return {s: h.digest() for s, h in hashers.items()}


def read_files(sources: list[StreamedTensorFile]) -> None:
    """Fill every planned destination of ``sources``, checking each file's digest over the bytes as they are read.

    One pass: the hashing runs in the helper thread, behind the reads (both release the
    GIL). When there are at least :data:`PARALLEL_MIN` bytes to read, the bytes are
    split in two halves read by two threads (this one and a reader thread): a read
    from the page cache (the second pass of a file verified first) is a copy by the
    kernel, and so are the page faults of fresh arrays; two threads do both at twice
    the speed, and the disk sees two streams. For a file not verified first, a
    mismatch is damage; for one that was, it is a change in place between the
    verification and this read: reported, never silently used. Every file is read
    before the first mismatch is raised, in file order.

    Raises:
        CorruptCheckpointError: The bytes read do not match a manifest's digest, or a file became shorter.
    """
    if not sources:
        return
    # The second pass of a file the first pass verified (SHA-256) needs no second digest when its
    # stamp shows no write since before that pass: any write, or os.utime, moves the ctime, which
    # nothing sets back (racy stamps excluded: see StreamedTensorFile.settled). Only its planned
    # destinations are read then, not the bytes nothing refers to.
    stamped = {s for s in sources if s.verified and s.settled}
    pieces = [p for s in sources for p in s._pieces() if not (s in stamped and p.view is None)]
    total = sum(p.length for p in pieces)
    stop = threading.Event()
    mine, theirs = pieces, []
    if total >= PARALLEL_MIN:
        half, acc = len(pieces), 0
        for i, p in enumerate(pieces):
            acc += p.length
            if acc >= total // 2:
                half = i + 1
                break
        mine, theirs = pieces[:half], pieces[half:]
    # SHA-256 of one file is sequential; files are hashed by two threads, in two groups of
    # about equal bytes (a restore of one big file hashes on one).
    groups = _two_groups([s for s in sources if s not in stamped])
    hash_jobs = [_pool().submit(_hash_pieces, [p for p in pieces if p.source in groups[0]], stop)]
    if groups[1]:
        try:
            hash_jobs.append(hash_pool_2().submit(_hash_pieces, [p for p in pieces if p.source in groups[1]], stop))
        except RuntimeError:  # the pool is shut down (interpreter exit): hash everything on the first
            hash_jobs = [_pool().submit(_hash_pieces, [p for p in pieces if p.source not in stamped], stop)]
    second: Future[None] | None = None
    errors: list[BaseException] = []
    try:
        if theirs:
            try:
                second = read_pool().submit(_read_pieces, theirs, stop)
            except RuntimeError:  # the pool is shut down (interpreter exit): read everything here
                mine = pieces
        try:
            _read_pieces(mine, stop)
        except BaseException as err:
            errors.append(err)
        if second is not None:
            try:
                second.result()
            except BaseException as err:
                errors.append(err)
        digests = {s: d for job in hash_jobs for s, d in job.result().items()}
    finally:
        if errors:
            for s in sources:
                s.close()
    if errors:
        # The reader that failed first, not the one it stopped.
        raise next((e for e in errors if not isinstance(e, _Stopped)), errors[0])
    failed: CorruptCheckpointError | None = None
    for s in sources:
        try:
            if s in stamped:
                s._check_second_pass()
            else:
                s._check_digest(digests.get(s) or Digest.of(b"", s.digest.algorithm))  # none: an empty file
        except CorruptCheckpointError as err:
            failed = failed or err
    if failed is not None:
        raise failed


def _two_groups(sources: list[StreamedTensorFile]) -> tuple[set[StreamedTensorFile], set[StreamedTensorFile]]:
    """The files split in two groups of about equal bytes (the second empty for one file)."""
    first: set[StreamedTensorFile] = set()
    second: set[StreamedTensorFile] = set()
    a = b = 0
    for s in sorted(sources, key=lambda s: -s.size):  # largest first: the greedy split stays even
        if a <= b:
            first.add(s)
            a += s.size
        else:
            second.add(s)
            b += s.size
    return first, second


def verify_files(sources: list[StreamedTensorFile]) -> None:
    """Verify each file by a streamed pass (:meth:`StreamedTensorFile.verify`), two files at a time.

    With at least :data:`PARALLEL_MIN` bytes in two or more files, this thread and the
    reader thread take the files in turn: the disk sees two streams, and one thread's
    reads overlap the other's waits. The first damaged file in file order is raised,
    once both threads stopped.

    Raises:
        CorruptCheckpointError: A file fails its checksum.
    """
    if len(sources) < 2 or sum(s.size for s in sources) < PARALLEL_MIN:
        for source in sources:
            source.verify()
        return
    lock = threading.Lock()
    todo = iter(range(len(sources)))
    failures: dict[int, BaseException] = {}

    def work(hash_here: bool) -> None:
        while True:
            with lock:
                if failures:
                    return
                i = next(todo, None)
            if i is None:
                return
            try:
                sources[i].verify(hash_here=hash_here)
            except BaseException as err:
                with lock:
                    failures[i] = err
                return

    try:
        # The reader thread hashes itself: it never waits on the hashing thread (see read_pool).
        other: Future[None] | None = read_pool().submit(work, True)
    except RuntimeError:  # the pool is shut down (interpreter exit): verify everything here
        other = None
    work(False)
    if other is not None:
        other.result()
    if failures:
        raise failures[min(failures)]

"""CRC-32, and the helper threads that overlap hashing with I/O.

The digests that decide trust are BLAKE3 or SHA-256 (:class:`cairn.manifest.Hasher`);
CRC-32 is the fast pre-check a format 2 manifest records beside each digest,
and the whole checksum of format 1 checkpoints, which cairn still reads.

``crc32`` is ISA-L's (the ``isal`` package) where it is installed: the same
values as ``zlib.crc32``, running CRCs included, at several times the speed
(10.6 GB/s against 2.7 GB/s measured on this project's machines), and it
releases the GIL too. Without ``isal`` it is ``zlib.crc32``: the checkpoint
format does not change, only the speed.
"""

from __future__ import annotations

import threading
import zlib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

__all__ = ["crc32", "hash_pool", "hash_pool_2", "read_pool"]

crc32: Callable[..., int]
try:
    from isal import isal_zlib as _isal_zlib

    crc32 = _isal_zlib.crc32
except ImportError:  # pragma: no cover - isal is a dependency; this keeps exotic platforms working
    crc32 = zlib.crc32

_pool: ThreadPoolExecutor | None = None
_read_pool: ThreadPoolExecutor | None = None
_lock = threading.Lock()


def hash_pool() -> ThreadPoolExecutor:
    """The process-wide single-thread pool that hashes behind I/O; its tasks run in submission order."""
    global _pool
    with _lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="cairn-hash")
        return _pool


_pool_2: ThreadPoolExecutor | None = None


def hash_pool_2() -> ThreadPoolExecutor:
    """A second single-thread hashing pool: a restore of several files hashes two groups of them at once.

    SHA-256 runs at about 1.4 GB/s per core, slower than a read from the page cache:
    one hashing thread would bound every restore. Its tasks, like :func:`hash_pool`'s,
    wait only on reads (never on another pool's hashing), so no two restores can wait
    on each other.
    """
    global _pool_2
    with _lock:
        if _pool_2 is None:
            _pool_2 = ThreadPoolExecutor(max_workers=1, thread_name_prefix="cairn-hash-2")
        return _pool_2


def read_pool() -> ThreadPoolExecutor:
    """The process-wide single-thread pool of a restore's second reader (``_tensorio.read_files``, ``verify_files``).

    Its tasks read files and hash them themselves; they never wait on another
    pool or thread. The hashing thread does wait on this pool's reads (``read_files``
    checks the bytes in file order as both readers fill them), so a task here that
    waited on the hashing thread could deadlock two concurrent restores.
    """
    global _read_pool
    with _lock:
        if _read_pool is None:
            _read_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="cairn-read")
        return _read_pool

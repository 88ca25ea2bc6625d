"""One helper thread for CRC-32s that overlap with I/O (``zlib.crc32`` releases the GIL)."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

_pool: ThreadPoolExecutor | None = None
_lock = threading.Lock()


def crc_pool() -> ThreadPoolExecutor:
    """The process-wide single-thread pool; its tasks run in submission order."""
    global _pool
    with _lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="cairn-crc")
        return _pool

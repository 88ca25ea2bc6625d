"""Measuring helpers: page cache, /proc counters, fsync'd raw I/O, interleaved timing."""

from __future__ import annotations

import contextlib
import ctypes
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

MB = 1_000_000
MiB = 1 << 20


# ----------------------------------------------------------------------------- page cache


def _can_drop_caches() -> bool:
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("1\n")
        return True
    except OSError:
        return False


CAN_DROP = _can_drop_caches()


def drop_cache(paths: Iterable[str] = (), *, whole: bool = True) -> str:
    """Evict the files' pages (with ``whole``, as root: the whole page cache). Returns the method used.

    ``whole=False`` evicts only the given files (posix_fadvise), leaving Python's own
    files cached: right for timing a command whose start-up is not the subject.
    """
    os.sync()
    if CAN_DROP and whole:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return "drop_caches"
    for p in paths:
        for root, _dirs, files in os.walk(p) if os.path.isdir(p) else [(os.path.dirname(p), [], [os.path.basename(p)])]:
            for name in files:
                try:
                    fd = os.open(os.path.join(root, name), os.O_RDONLY)
                except OSError:
                    continue
                try:
                    os.fdatasync(fd)
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                finally:
                    os.close(fd)
    return "fadvise"


# ----------------------------------------------------------------------------- /proc counters


def proc_io() -> dict[str, int]:
    """This process's I/O counters (rchar, wchar, read_bytes, write_bytes, ...)."""
    out = {}
    with open("/proc/self/io") as f:
        for line in f:
            k, v = line.split(":")
            out[k.strip()] = int(v)
    return out


def io_delta(before: dict[str, int]) -> dict[str, int]:
    now = proc_io()
    return {k: now[k] - before.get(k, 0) for k in now}


def proc_status_kb(key: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    raise KeyError(key)


def reset_peak_rss() -> bool:
    """Reset VmHWM to the current RSS (Linux >= 4.0)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5\n")
        return True
    except OSError:
        return False


def rss_bytes() -> int:
    return proc_status_kb("VmRSS") * 1024


def peak_rss_bytes() -> int:
    return proc_status_kb("VmHWM") * 1024


# ----------------------------------------------------------------------------- memory warm-up


def warm_memory(nbytes: int) -> float:
    """Touch ``nbytes`` of fresh memory once, so that later first touches are not the VM's slow ones."""
    t0 = time.perf_counter()
    chunk = 256 * MiB
    bufs = []
    left = nbytes
    while left > 0:
        n = min(chunk, left)
        a = np.empty(n, np.uint8)
        a[::4096] = 1
        a.fill(0)
        bufs.append(a)
        left -= n
    del bufs
    return time.perf_counter() - t0


# ----------------------------------------------------------------------------- raw I/O


def raw_write(path: str, buffers: list[memoryview]) -> int:
    """Write the buffers back to back into a new file and fsync it (dd with fdatasync)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    total = 0
    try:
        for b in buffers:
            mv = b.cast("B") if b.format != "B" or b.ndim != 1 else b
            while mv:
                n = os.write(fd, mv)
                total += n
                mv = mv[n:]
        os.fsync(fd)
    finally:
        os.close(fd)
    return total


def raw_read(path: str, buf: memoryview) -> int:
    """Read a whole file into an existing (already touched) buffer."""
    fd = os.open(path, os.O_RDONLY)
    got = 0
    try:
        while True:
            n = os.readv(fd, [buf[got:]])
            if n == 0:
                break
            got += n
    finally:
        os.close(fd)
    return got


def fsync_path(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def dir_size(path: str) -> int:
    if os.path.isfile(path):
        return os.path.getsize(path)
    total = 0
    for root, _dirs, files in os.walk(path):
        for f in files:
            total += os.lstat(os.path.join(root, f)).st_size
    return total


# ----------------------------------------------------------------------------- timing


@dataclass
class Method:
    """One contender of an interleaved measurement."""

    name: str
    run: Callable[[Any], Any]
    setup: Callable[[int], Any] | None = None  # untimed, gets the round index
    teardown: Callable[[Any, Any], None] | None = None  # untimed, gets (setup value, run result)
    times: list[float] = field(default_factory=list)
    extra: list[Any] = field(default_factory=list)

    @property
    def median(self) -> float:
        return statistics.median(self.times)

    @property
    def best(self) -> float:
        return min(self.times)


def interleave(
    methods: list[Method],
    reps: int,
    warmup: int = 1,
    log: Callable[[str], None] | None = None,
    end_round: Callable[[int], None] | None = None,
) -> None:
    """Run every method once per round, ``warmup`` untimed rounds then ``reps`` timed ones.

    Interleaving spreads the machine's noise (other jobs, disk state) over all
    contenders, and the order rotates each round so that none always runs first
    (right after ``end_round``'s clean-up) or last.
    """
    for r in range(warmup + reps):
        k = r % len(methods)
        for m in methods[k:] + methods[:k]:
            ctx = m.setup(r) if m.setup else None
            t0 = time.perf_counter()
            res = m.run(ctx)
            dt = time.perf_counter() - t0
            if m.teardown:
                m.teardown(ctx, res)
            del res
            if r >= warmup:
                m.times.append(dt)
            if log:
                log(f"    {'warmup' if r < warmup else 'round ' + str(r - warmup + 1)}: {m.name:<34} {dt:8.3f} s")
        if end_round:
            end_round(r)


def subprocess_times(
    argv: list[str], reps: int, env: dict[str, str] | None = None, cwd: str | None = None
) -> list[float]:
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, env=env, cwd=cwd)
        out.append(time.perf_counter() - t0)
    return out


def python() -> str:
    return sys.executable


def load_average() -> tuple[float, float, float]:
    return os.getloadavg()


def fadvise_available() -> bool:
    return hasattr(os, "posix_fadvise")


def malloc_trim() -> None:
    """Give freed heap memory back to the OS, so RSS readings are not skewed by earlier work."""
    with contextlib.suppress(OSError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


@contextlib.contextmanager
def one_reader() -> Iterator[None]:
    """Restores read with one thread, as before cairn split large reads between two (an A/B in one run)."""
    import cairn._tensorio as tensorio

    old = tensorio.PARALLEL_MIN
    tensorio.PARALLEL_MIN = 1 << 62
    try:
        yield
    finally:
        tensorio.PARALLEL_MIN = old

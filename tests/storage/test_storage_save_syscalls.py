"""What a local save costs the system: syncs, threads (the small, frequent checkpoints of RL runs).

A save makes its staging tree durable with one sync before the commit's rename
and one fsync of the parent folder after it; the owner record's heartbeat is
beaten by one shared thread, so a save starts no thread of its own.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import pytest
from storage_components import Agent

from cairn.storage import local


def _counting(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    counts = {"fsync": 0, "threads": 0}
    real_fsync, real_start = os.fsync, threading.Thread.start

    def fsync(fd: int) -> None:
        counts["fsync"] += 1
        real_fsync(fd)

    def start(self: threading.Thread) -> None:
        counts["threads"] += 1
        real_start(self)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(threading.Thread, "start", start)
    return counts


@pytest.mark.skipif(local._syncfs is None, reason="no trustworthy syncfs on this kernel: fsync per file")
def test_a_save_syncs_twice_whatever_its_number_of_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    agent = Agent(64)
    agent.save_to_path(tmp_path / "warm")  # the first save may start the shared helper threads
    files = sum(len(f) for _, _, f in os.walk(tmp_path / "warm"))
    assert files > 10
    counts = _counting(monkeypatch)
    agent.save_to_path(tmp_path / "ck")
    agent.save_to_path(tmp_path / "ck")  # over an existing checkpoint: an atomic swap
    assert counts["fsync"] == 2 * 1, counts  # the parent folder after each rename; syncfs before it
    assert counts["threads"] == 0, counts


def test_a_save_outside_a_staging_folder_is_still_fsynced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Files written for another process's staging folder (remote actors) are fsynced as they are written."""
    storage = local.LocalStorage()
    counts = _counting(monkeypatch)
    storage.write_file(str(tmp_path / "f"), [b"x" * 100, b"y" * 3])
    assert counts["fsync"] == 1
    assert (tmp_path / "f").read_bytes() == b"x" * 100 + b"yyy"


def test_many_small_tensors_are_written_exactly(tmp_path: Path) -> None:
    """Small chunks go out batched (writev); the file and its digests are those of every byte in order."""
    import hashlib
    import zlib

    import blake3

    storage = local.LocalStorage()
    chunks: list[Any] = [os.urandom(n % 97) for n in range(2000)] + [os.urandom(3 << 20), b"tail"]
    entry = storage.write_file(str(tmp_path / "f"), chunks)
    data = b"".join(chunks)
    assert (tmp_path / "f").read_bytes() == data
    assert entry.size == len(data)
    assert (entry.digest.algorithm, entry.digest.hex) == ("blake3", blake3.blake3(data).hexdigest())
    assert entry.crc32 == zlib.crc32(data)  # of the bytes digested: what the save's read-back compares
    again = storage.write_file(str(tmp_path / "g"), chunks, algorithm="sha256")
    assert (again.digest.algorithm, again.digest.hex) == ("sha256", hashlib.sha256(data).hexdigest())


def test_the_digest_is_of_the_bytes_the_file_holds_when_the_source_changes_after_its_write(tmp_path: Path) -> None:
    """Issue 34: each batch is hashed as read back from the file, not from the caller's memory.

    The chunks come from a generator that changes every buffer it yielded once the writer asks
    for the next one: the file holds the values as they were written, and its digest is theirs
    (hashed from memory behind the writes, it was the changed buffer's, or either, by timing).
    """
    import blake3

    storage = local.LocalStorage()
    originals = [os.urandom(3 << 20) for _ in range(4)]

    def chunks() -> Any:
        for data in originals:
            buf = bytearray(data)
            yield buf
            buf[:] = bytes(len(buf))  # written by now: the writer asked for the next chunk

    entry = storage.write_file(str(tmp_path / "f"), chunks())
    written = (tmp_path / "f").read_bytes()
    assert written == b"".join(originals)
    assert entry.size == len(written)
    assert entry.digest.hex == blake3.blake3(written).hexdigest()


def test_a_storage_sent_to_another_process_fsyncs_into_the_staging_it_did_not_begin(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Remote actors get a pickled copy of the storage: their files in the driver's staging are fsynced."""
    import pickle

    storage = local.LocalStorage(deadline=7.0)
    staging = storage.begin_write(str(tmp_path / "ck"))
    try:
        copy = pickle.loads(pickle.dumps(storage))
        assert copy.deadline == 7.0
        counts = _counting(monkeypatch)
        copy.write_file(os.path.join(staging, "from_actor"), [b"abc"])
        assert counts["fsync"] == 1
        storage.write_file(os.path.join(staging, "from_driver"), [b"abc"])
        assert counts["fsync"] == 1  # the driver's own: synced by its commit
    finally:
        storage.abort(staging, str(tmp_path / "ck"))


def test_a_small_file_that_lost_bytes_fails_the_save_before_its_commit(tmp_path: Path) -> None:
    """Outside a manager's save the plan's own small files are not read back; their size still is checked
    (one stat): a file that holds fewer bytes than were written fails the save, not the next load."""
    from cairn import CorruptCheckpointError
    from cairn._save import check_written

    storage = local.LocalStorage()
    path = str(tmp_path / "metadata.json")
    chunks: list[Any] = [b'{"format": 3, "padding": "' + b"x" * 200 + b'"}']
    entry = storage.write_file(path, chunks)
    check_written(storage, [(path, entry, chunks)])  # as written: passes
    os.truncate(path, entry.size - 10)  # what a filesystem that drops the end of a write leaves
    with pytest.raises(CorruptCheckpointError, match=f"holds {entry.size - 10} bytes where {entry.size}"):
        check_written(storage, [(path, entry, chunks)])


_NO_POOL_CHILD = """
import os, sys
sys.path.insert(0, {here!r})
from storage_components import Agent
agent = Agent(12000)  # its leaves hold about 50 kB each: blake3 hands such an input to rayon
before = len(os.listdir("/proc/self/task"))
agent.save_to_path({path!r})
print(before, len(os.listdir("/proc/self/task")))
"""


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="counts the process's threads in /proc")
def test_a_small_save_starts_no_hashing_threads(tmp_path: Path) -> None:
    """Files under 1 MiB are digested on the saving thread: no rayon pool, whose idle workers spin on a core."""
    import subprocess
    import sys

    code = _NO_POOL_CHILD.format(here=str(Path(__file__).parent), path=str(tmp_path / "ck"))
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    before, after = (int(x) for x in out.split())
    # The heartbeat thread of the owner record is the one thread a save may start (shared, kept).
    assert after - before <= 1, out
    from cairn.manifest import PARALLEL_HASH_MIN

    assert sum(f.stat().st_size for f in (tmp_path / "ck").rglob("*")) < PARALLEL_HASH_MIN

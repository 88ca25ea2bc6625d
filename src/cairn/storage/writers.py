"""Several writers on one root: who owns a save in flight, and when its leftovers may go (SPEC 8).

Every save claims its staging place before it writes anything: an **owner
record** (a random id, the host, the process) is written next to it (local
disk: a hidden sibling file; object stores: an object in the save's root
folder), and a **heartbeat** thread refreshes it every :func:`heartbeat_every`
seconds while the save runs (local disk: the file's mtime; object stores: the
``beat`` time in the record). Whoever cleans up (the first save of a manager)
removes another writer's staging place only when that writer is gone:

* on this machine, when its process no longer runs (checked by pid and the
  process's start time, so a reused pid does not count), or, in this process,
  when the save is no longer in flight;
* on another machine, when its heartbeat is older than :func:`stale_after`
  (:data:`STALE_AFTER` seconds, ``CAIRN_STALE_WRITER_SECONDS`` in the
  environment overrides it: tests, or clocks known to drift).

A commit checks that the staging place is still its own (the owner record is
still there and still names it; on object stores every planned file is still
present) and fails with a ``CheckpointError`` instead of committing when
another writer removed it. Every name this protocol gives a file or folder is
defined here and nowhere else.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace

# ----------------------------------------------------------------------------- names

TMP_MARK = ".cairn-tmp-"
"""In every hidden name a local save or delete gives a folder: ``.{target}{TMP_MARK}{id}{suffix}``."""

OWNER_SUFFIX = ".owner"
"""Local disk: the owner record of staging folder ``S`` is the file ``S + OWNER_SUFFIX`` beside it
(outside the folder, so that a committed checkpoint holds only checkpoint files)."""

DELETING_SUFFIX = "-deleting"
"""Local disk: a folder being deleted is first renamed to a hidden name with this suffix."""

OLD_SUFFIX = "-old"
"""Local disk, without ``renameat2``: the old checkpoint moved aside while the new one is renamed in."""

INFLIGHT = ".cairn-tmp-inflight"
"""Object stores: the owner record, an object in the root folder of a save in flight. Written
before any other file of the save and deleted after its root manifest; a folder holding it and
no root manifest is a save that has not committed, and so is every folder below it."""

WRITER_FILES = frozenset({INFLIGHT})
"""Names a save may leave in a checkpoint folder besides the checkpoint's own files (a save killed
between its root manifest and the deletion of its owner record); a later save replaces them."""

MAX_RECORD_BYTES = 4096
"""An owner record is a small JSON object; a reader never reads more of one."""

MAX_FOLDER_DEPTH = 512
"""Object stores: the most folders a checkpoint path may lie below (S3 keys are at most 1024 bytes, so
no S3 path is deeper). A reader checks every one of them for a save in flight, in one batch of
requests; a deeper path is refused rather than checked in part."""

STALE_AFTER = 600.0
"""Seconds without a heartbeat after which a writer on another machine counts as gone."""

STALE_AFTER_ENV = "CAIRN_STALE_WRITER_SECONDS"

HEARTBEAT_EVERY = 5.0
"""Seconds between heartbeats of a save in flight (at most a quarter of :func:`stale_after`)."""

STOP_WAIT = 2.0
"""Seconds a commit or abort waits for a heartbeat in progress."""

_TMP_RE = re.compile(
    r"\.(?P<target>.+)"
    + re.escape(TMP_MARK)
    + r"(?P<id>[A-Za-z0-9]+)(?P<suffix>"
    + "|".join(re.escape(s) for s in (OWNER_SUFFIX, DELETING_SUFFIX, OLD_SUFFIX))
    + r")?\Z"
)


def stale_after() -> float:
    """The heartbeat age (seconds) after which a writer on another machine counts as gone."""
    value = os.environ.get(STALE_AFTER_ENV)
    if value:
        with contextlib.suppress(ValueError):
            return max(0.0, float(value))
    return STALE_AFTER


def heartbeat_every() -> float:
    """Seconds between two heartbeats of a save in flight."""
    return max(0.01, min(HEARTBEAT_EVERY, stale_after() / 4))


def new_write_id() -> str:
    """A random id for one save (12 hex digits)."""
    return uuid.uuid4().hex[:12]


def tmp_name(target: str, write_id: str, suffix: str = "") -> str:
    """The hidden name of a staging folder (or its owner record, ``-deleting`` or ``-old`` folder)."""
    return f".{target}{TMP_MARK}{write_id}{suffix}"


@dataclass(frozen=True)
class TmpName:
    """A hidden name parsed: the folder it stands for, the write's id and the kind (its suffix)."""

    target: str
    id: str
    suffix: str


def parse_tmp_name(name: str) -> TmpName | None:
    """Parse a name :func:`tmp_name` gives (earlier versions' nested names too), else None.

    ``..step_1.cairn-tmp-a.cairn-tmp-b-deleting`` (an earlier version deleting a
    staging folder) stands for ``step_1``: the target is unwrapped until it is
    not a hidden name itself.
    """
    m = _TMP_RE.match(name)
    if m is None:
        return None
    target = m.group("target")
    inner = parse_tmp_name(target)
    while inner is not None:
        target = inner.target
        inner = parse_tmp_name(target)
    return TmpName(target, m.group("id"), m.group("suffix") or "")


# ----------------------------------------------------------------------------- who writes


def _read_small(path: str) -> str | None:
    try:
        with open(path, encoding="ascii") as f:
            return f.read(256)
    except (OSError, ValueError):
        return None


def _machine() -> str:
    """This machine and pid namespace: a pid means the same process only where this is equal."""
    boot = (_read_small("/proc/sys/kernel/random/boot_id") or "").strip()
    try:
        pidns = str(os.stat("/proc/self/ns/pid").st_ino)
    except OSError:
        pidns = ""
    return f"{socket.gethostname()}/{boot}/{pidns}"


def _process_start(pid: int) -> str | None:
    """When process ``pid`` started (Linux: clock ticks since boot), or None; "" for a zombie."""
    stat = _read_small_any(f"/proc/{pid}/stat")
    if stat is None:
        return None
    fields = stat.rsplit(")", 1)[-1].split()
    if len(fields) < 20:
        return None
    if fields[0] in ("Z", "X"):
        return ""  # exited, not yet reaped: not running
    return fields[19]


def _read_small_any(path: str) -> str | None:
    try:
        with open(path, "rb") as f:
            return f.read(4096).decode("ascii", "replace")
    except OSError:
        return None


MACHINE = _machine()
"""This machine's identity in owner records (host name, boot id, pid namespace)."""


@dataclass(frozen=True)
class Owner:
    """The owner record of a save in flight.

    Attributes:
        id: The save's random id.
        host: The host name (for messages).
        machine: :data:`MACHINE` of the writer.
        pid: The writer's process id.
        pid_start: When that process started (None where unknown).
        beat: The writer's clock at its last heartbeat (object stores; on a local disk
            the record file's mtime is the heartbeat).
        switching: Object stores, a save over an existing checkpoint: the new checkpoint is
            complete in its staging folder (:func:`tmp_name` of the target and :attr:`id`) and
            is being copied into place. From the moment a record says so the save has
            committed: readers load the staging folder, and whoever finds the writer gone
            finishes the copy instead of deleting anything.
    """

    id: str
    host: str
    machine: str
    pid: int
    pid_start: str | None
    beat: float
    switching: bool = False

    @classmethod
    def of_this_process(cls, write_id: str) -> Owner:
        """The record of a save with id ``write_id`` made by this process, now."""
        pid = os.getpid()
        return cls(write_id, socket.gethostname(), MACHINE, pid, _process_start(pid), time.time())

    def beating(self) -> Owner:
        """The record with the heartbeat time set to now."""
        return replace(self, beat=time.time())

    def to_bytes(self) -> bytes:
        """The record as a small JSON object."""
        rec = {
            "cairn": "save in flight",
            "id": self.id,
            "host": self.host,
            "machine": self.machine,
            "pid": self.pid,
            "pid_start": self.pid_start,
            "beat": self.beat,
        }
        if self.switching:
            rec["switching"] = True
        return json.dumps(rec).encode("utf-8")

    @classmethod
    def from_bytes(cls, data: bytes | bytearray | None) -> Owner | None:
        """Parse a record; None when it is missing or not one (damaged, hostile, cut short)."""
        if not data or len(data) > MAX_RECORD_BYTES:
            return None
        try:
            rec = json.loads(bytes(data).decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError):
            return None
        if not isinstance(rec, dict):
            return None
        wid, host, machine, pid, start, beat = (
            rec.get(k) for k in ("id", "host", "machine", "pid", "pid_start", "beat")
        )
        if not (isinstance(wid, str) and isinstance(host, str) and isinstance(machine, str)):
            return None
        if type(pid) is not int or not (start is None or isinstance(start, str)):
            return None
        if not isinstance(beat, int | float) or isinstance(beat, bool) or beat != beat:
            return None
        switching = rec.get("switching", False)
        if type(switching) is not bool:
            return None
        return cls(wid, host, machine, pid, start, float(beat), switching)

    def describe(self) -> str:
        """``host pid 123 (save 0123456789ab)``, for messages."""
        return f"host {self.host} pid {self.pid} (save {self.id})"


def _pid_runs(pid: int, start: str | None) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # it runs, as another user
    except OSError:
        return True  # cannot tell: assume it runs
    now = _process_start(pid)
    if now == "":
        return False
    return start is None or now is None or now == start


def gone_because(owner: Owner | None, last_beat: float | None) -> str | None:
    """Why the writer of a record is gone (its leftovers may be removed), or None while it may write.

    Args:
        owner: The record, None when it is missing or unreadable.
        last_beat: The time of its last heartbeat (record mtime, or ``owner.beat``); None for
            unknown (treated as stale).
    """
    if owner is not None and owner.machine == MACHINE:
        if owner.pid == os.getpid():
            return None if is_live_here(owner.id) else "its save in this process has ended"
        return None if _pid_runs(owner.pid, owner.pid_start) else f"its process {owner.pid} is no longer running"
    if last_beat is None:
        return "it has no readable owner record"
    age = time.time() - last_beat
    if age > stale_after():
        who = owner.describe() if owner is not None else "an unknown writer"
        return f"the last heartbeat of {who} was {age:.0f} s ago (over {stale_after():.0f} s)"
    return None


# ----------------------------------------------------------------------------- saves in flight here


class Claim:
    """A save in flight in this process: its owner record, refreshed by the shared heartbeat thread.

    ``beat()`` refreshes the record and returns False once the record is gone or
    names another save (another writer removed the staging place): the heartbeat
    stops and :attr:`lost` is set. One thread per process beats every claim that
    is due (:class:`_Heart`), so a save starts no thread of its own; a save that
    ends before its first period is never beaten at all, exactly as before.
    """

    def __init__(self, owner: Owner, beat: Callable[[Owner], bool]) -> None:
        """Start the heartbeat of the save that ``owner`` describes."""
        self.owner = owner
        self.lost = False
        self.checked = False
        self._beat = beat
        self._stopped = False
        self._beating = threading.Lock()  # held during a beat: stop() takes it so that none follows
        self.every = heartbeat_every()
        self.due = time.monotonic() + self.every
        _HEART.add(self)

    def beat_once(self) -> None:
        """One heartbeat (the shared thread calls it when it is due)."""
        with self._beating:
            if self._stopped:
                return
            try:
                alive = self._beat(self.owner.beating())
            except Exception:  # a transient storage error: the next beat tries again
                alive = True
            if not alive:
                self.lost = True
                self._stopped = True
            self.due = time.monotonic() + self.every

    @property
    def stopped(self) -> bool:
        """Whether this claim is no longer beaten."""
        return self._stopped

    def stop(self) -> None:
        """Stop the heartbeat and wait for a beat in progress (so none can follow)."""
        self._stopped = True
        _HEART.discard(self)
        # A beat takes milliseconds; one stuck on a failing storage is not waited for
        # (it gives up within the storage's deadline, and finds the record gone or not ours).
        if not _HEART.is_current_thread() and self._beating.acquire(timeout=STOP_WAIT):
            self._beating.release()


class _Heart:
    """The one heartbeat thread of a process: beats each claim when it is due, sleeps otherwise.

    Started with the first claim and kept (idle, a daemon) for the next saves; a
    forked child starts its own when it claims.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._claims: set[Claim] = set()
        self._thread: threading.Thread | None = None

    def add(self, c: Claim) -> None:
        with self._cond:
            self._claims.add(c)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="cairn-heartbeat", daemon=True)
                self._thread.start()
            self._cond.notify()

    def discard(self, c: Claim) -> None:
        with self._cond:
            self._claims.discard(c)

    def is_current_thread(self) -> bool:
        return self._thread is threading.current_thread()

    def reset_after_fork(self) -> None:
        self._cond = threading.Condition()
        self._claims = set()
        self._thread = None

    def _run(self) -> None:
        while True:
            with self._cond:
                now = time.monotonic()
                due = [c for c in self._claims if c.due <= now]
                if not due:
                    wait = min((c.due for c in self._claims), default=now + 60.0) - now
                    self._cond.wait(timeout=max(0.001, wait))
                    continue
            for c in due:  # outside the lock: a beat may take a storage round trip
                c.beat_once()
                if c.stopped:
                    self.discard(c)


_HEART = _Heart()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_HEART.reset_after_fork)


_LOCK = threading.Lock()
_CLAIMS: dict[str, Claim] = {}  # by the staging place's URI
_LIVE: set[str] = set()  # ids of the saves in flight in this process


def claim(key: str, owner: Owner, beat: Callable[[Owner], bool]) -> Claim:
    """Register the save in flight at ``key`` (its staging URI) and start its heartbeat."""
    c = Claim(owner, beat)
    with _LOCK:
        _CLAIMS[key] = c
        _LIVE.add(owner.id)
    return c


def current(key: str) -> Claim | None:
    """The claim of the save in flight at ``key``, if it is this process's."""
    with _LOCK:
        return _CLAIMS.get(key)


def release(key: str, *, keep_live: bool = False) -> Claim | None:
    """Stop the heartbeat of the save at ``key`` and forget it; returns its claim (None if unknown).

    ``keep_live``: the save still works on its place (a switch copies its checkpoint into place
    after the commit): it stays in flight for :func:`is_live_here` until :func:`ended`.
    """
    with _LOCK:
        c = _CLAIMS.pop(key, None)
    if c is not None:
        c.stop()
        if not keep_live:
            ended(c.owner.id)
    return c


def ended(write_id: str) -> None:
    """The save ``write_id`` of this process is done with its place: its leftovers are anyone's to remove."""
    with _LOCK:
        _LIVE.discard(write_id)


def is_live_here(write_id: str) -> bool:
    """Whether the save ``write_id`` is in flight in this process."""
    with _LOCK:
        return write_id in _LIVE


def lost_error(where: str, detail: str) -> str:
    """The message of a save whose staging place another writer removed."""
    return (
        f"The save to {where} was not committed: its staging was removed by another writer on the same "
        f"root ({detail}), which judged it abandoned (no heartbeat for {stale_after():.0f} s, or its process "
        "gone). Nothing was committed and any previous checkpoint there is intact; save again, and make "
        "sure only one job writes to this root."
    )

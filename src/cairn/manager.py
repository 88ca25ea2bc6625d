"""``CheckpointManager``: when to save and which checkpoints to keep, never how to write.

Step folders are named ``step_000000123`` under a root (local, ``memory://``,
``s3://`` or any fsspec filesystem). A checkpoint counts only once committed
(its root manifest is valid); half-written ones are never listed, and the
first ``save`` of a manager removes them (a manager that only reads, such as
``cairn ls`` during training, deletes nothing). Old checkpoints are deleted only after a new one is committed.
Files that did not change since the previous checkpoint are hard-linked (local
disk) or copied server-side (object stores) instead of written again; each
step folder stays complete on its own.

Step folders are exactly the names :func:`step_folder_name` writes
(:func:`parse_step_folder`); any other name under the root is not the
manager's: never listed, never deleted, but the pointer file :data:`POINTER`
(``cairn-latest.json``), which a saving manager rewrites after each commit
and before retention so that readers racing retention always find a step
(docs/format.md, "A reader racing a writer's retention").

Recovery. :meth:`CheckpointManager.restore_latest` (and
:meth:`CheckpointManager.load_latest`, which ``cairn train --resume`` uses)
falls back to the newest checkpoint that verifies, logging a warning (logger
``cairn.manager``) that names each one skipped and why; a damaged
checkpoint is never applied, and when none verifies a
``CorruptCheckpointError`` lists them. Retention never deletes the newest
checkpoint that verifies: a save reads back what it wrote before its root
manifest (one that fails its own check fails the save, uncommitted, and
retention does not run), then checks that the step folder still holds the
root manifest it committed; the checkpoint just committed then counts as
verified, so in the usual case (it is the newest)
nothing older is read; otherwise checkpoints are verified from the newest down
until a sound one is found.
:meth:`CheckpointManager.latest` and :meth:`CheckpointManager.best` return a
checkpoint that verifies (SPEC 6): they read each candidate in full, newest
(best) first; pass ``verified=False`` for the cheap answer from manifests and
metadata alone, as listings do. :meth:`CheckpointManager.checkpoints` is always
cheap, and :meth:`CheckpointManager.verify` checks one checkpoint.

With ``async_save=True``, :meth:`CheckpointManager.save` takes a snapshot (a
copy of every array and tensor in the state) and returns; a background thread
writes and commits it. At most one save is in flight: a second ``save`` waits
for the first. So ``save`` blocks for the time of one memory copy of the state
(plus any previous save still running), and the extra memory is one copy of
the state, kept between saves: the next snapshot reuses those buffers, which
is several times faster than copying into fresh memory.
"""

from __future__ import annotations

import atexit
import copy
import json
import logging
import os
import re
import sys
import threading
import time
import weakref
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import numpy as np

from cairn import _reader, _save, _verify
from cairn._metrics import current_metric_names, jsonable_metrics
from cairn.errors import (
    CheckpointError,
    CheckpointNotFoundError,
    CorruptCheckpointError,
    SignatureError,
)
from cairn.manifest import Digest, FileEntry, check_digest_algorithm
from cairn.registry import registered_for_value
from cairn.retention import (
    KeepBest,
    Policy,
    RetentionPolicy,
    next_to_verify,
    ranking,
    steps_to_keep,
)
from cairn.storage.base import Storage, check_deadline
from cairn.storage.resolve import resolve_storage

if TYPE_CHECKING:
    from cairn.checkpointable import Checkpointable

__all__ = [
    "CheckpointInfo",
    "CheckpointManager",
    "parse_step_folder",
    "snapshot_state",
    "step_folder_name",
]

# Exactly the names `step_folder_name` writes: nine ASCII digits, or more without a leading
# zero. `[0-9]` (not `\d`, which is Unicode) and `\Z` (not `$`, which matches before a
# trailing newline). A name that does not match is not ours: never listed, never deleted.
STEP_RE = re.compile(r"step_([0-9]{9}|[1-9][0-9]{9,})\Z")
MANAGER_KEY = "manager"

_MAX_METRIC_NAME = 1000
"""The longest metric name read back as a checkpoint's ranking (RLlib's nested names are under 100)."""

T = TypeVar("T")

_LOG = logging.getLogger(__name__)
"""``cairn.manager``: debug, each save and what it reused; info, what retention deleted and which
checkpoint a load used; warning, each damaged checkpoint a load skipped for an older one; error, a
background save that failed at exit (docs/cli.md, "Logging")."""

# Errors that mean "this checkpoint is damaged or gone", the ones a fallback to an older
# checkpoint may skip. Others (a class that does not fit, pickle not allowed, a storage that
# fails) are the caller's to see: an older checkpoint would fail the same way or hide them.
_DAMAGE = (CorruptCheckpointError, CheckpointNotFoundError)

RECHECK_EVERY = 8
"""The default ``recheck_every`` of :class:`CheckpointManager`."""

POINTER = "cairn-latest.json"
"""The root's pointer file: ``{"step": N}``, the newest step a writer committed (SPEC 8).

A manager writes it (whole or not at all, as readers see it) after each commit and
before its retention; readers read it with the listing, so that a step deleted under
them is always followed by a newer one they can find."""

MAX_POINTER_BYTES = 4096
"""The largest pointer file a reader reads; a larger one is ignored (the listing still finds every checkpoint)."""


def step_folder_name(step: int) -> str:
    """``step_000000123``: zero-padded so that names sort like steps."""
    return f"step_{step:09d}"


def parse_step_folder(name: str) -> int | None:
    """The step of a step folder named as :func:`step_folder_name` names it, else None.

    The one rule for which folder names are a manager's checkpoints: a name is one only if
    ``step_folder_name(step)`` gives it back exactly, so the manager can always find it again
    by the name it rebuilds (to delete it, say). Other names (``step_0000000001``, Unicode
    digits, a trailing newline) belong to someone else and are left alone.
    """
    m = STEP_RE.match(name)
    if m is None:
        return None
    step = int(m.group(1))
    return step if step_folder_name(step) == name else None


@dataclass(frozen=True)
class CheckpointInfo:
    """A committed checkpoint of a manager.

    Attributes:
        step: The step it was saved at.
        path: Its path (a URI for remote storage), ready for ``restore_from_path``.
        metrics: The metrics recorded with it.
        created: When it was written (ISO 8601, UTC).
        best_by: The metric and mode (``"max"`` or ``"min"``) that the manager which saved it
            ranks by (its ``best()``), or None when it ranks by none or the checkpoint
            predates the record: ``cairn ls`` ranks a run as its own manager does.
    """

    step: int
    path: str
    metrics: dict[str, Any]
    created: str
    best_by: tuple[str, Literal["max", "min"]] | None = None


class SnapshotPool:
    """Buffers of the previous snapshot, reused by the next one.

    Fresh memory is expensive (page faults and zeroing run at a fraction of
    memcpy speed), so an async save copies the state into the buffers the
    previous save used, once that save is committed. At most one save is in
    flight, so the pool holds at most one state's worth of memory.
    """

    def __init__(self) -> None:
        """An empty pool."""
        self._free: dict[tuple[Any, ...], list[Any]] = {}

    def take(self, key: tuple[Any, ...]) -> Any | None:
        """A free buffer for ``key`` (kind, dtype, shape), or None."""
        bufs = self._free.get(key)
        return bufs.pop() if bufs else None

    def give_back(self, taken: list[tuple[tuple[Any, ...], Any]]) -> None:
        """Return the buffers of a committed snapshot."""
        self._free = {}
        for key, buf in taken:
            self._free.setdefault(key, []).append(buf)


def snapshot_state(
    state: Any, pool: SnapshotPool | None = None, taken: list[tuple[tuple[Any, ...], Any]] | None = None
) -> Any:
    """A copy of a state tree that later changes to the live objects cannot reach.

    Arrays and tensors are copied (into buffers from ``pool`` when it has ones
    of the right kind, dtype and shape; every buffer used is appended to
    ``taken``); containers, registered values included, are rebuilt; other
    leaves are immutable. (``CheckpointManager`` itself snapshots the encoded
    plan instead: ``cairn._save.snapshot_plan``.)
    """
    t = type(state)
    if t is dict:
        return {k: snapshot_state(v, pool, taken) for k, v in state.items()}
    if isinstance(state, dict):
        # A dict subclass (a module's OrderedDict state_dict) keeps its class, so that the save refuses
        # or accepts it exactly as it would the live state, but its tensors are copied like a dict's.
        copied = copy.copy(state)
        for k, v in state.items():
            copied[k] = snapshot_state(v, pool, taken)
        return copied
    if t is list:
        return [snapshot_state(v, pool, taken) for v in state]
    if t is tuple:
        return tuple(snapshot_state(v, pool, taken) for v in state)
    if isinstance(state, np.ndarray):
        if state.dtype.hasobject:
            return state.copy()
        key: tuple[Any, ...] = ("np", state.dtype.str, state.shape)
        buf = pool.take(key) if pool is not None else None
        if buf is None:
            buf = np.empty(state.shape, dtype=state.dtype)
        np.copyto(buf, state)
        if taken is not None:
            taken.append((key, buf))
        return buf
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(state, torch.Tensor):
        src = state.detach()
        if src.device.type != "cpu" or src.layout != torch.strided or src.is_quantized:
            return src.clone()
        key = ("torch", str(src.dtype), tuple(src.shape))
        buf = pool.take(key) if pool is not None else None
        if buf is None:
            buf = torch.empty(src.shape, dtype=src.dtype)
        buf.copy_(src)
        if taken is not None:
            taken.append((key, buf))
        return buf
    reg = registered_for_value(state)
    if reg is not None:
        # A registered value (a dataclass of arrays) is copied as the codec sees it: its encoded
        # form, rebuilt by its decoder. Returning it as it is would leave its arrays live (issue 33, F4).
        return reg.decode(snapshot_state(reg.encode(state), pool, taken))
    return state


class CheckpointManager:
    """Saves numbered checkpoints under a root, keeps the ones a policy asks for.

    Example::

        mgr = cairn.CheckpointManager("runs/ppo", keep_last=3, keep_best=1,
                                      metric="env_runners/episode_return_mean", mode="max")
        # the same, as composable policies (cairn.retention), plus every 1000th step:
        from cairn.retention import KeepBest, KeepEvery, KeepLast
        mgr = cairn.CheckpointManager(
            "runs/ppo", retention=KeepLast(3) | KeepBest(1, "env_runners/episode_return_mean") | KeepEvery(1000))
        for it in range(100):
            metrics = algo.train()
            mgr.save(algo, it, metrics=metrics)
        mgr.wait()
        mgr.restore_latest(algo)

    Args:
        root: The folder holding the step folders; local path or fsspec URI.
        retention: Which checkpoints to keep, as a policy of :mod:`cairn.retention`
            (``KeepLast(3) | KeepBest(1, "env_runners/episode_return_mean") | KeepEvery(1000)``, or
            any object with ``keep(entries) -> set[int]``). ``keep_last`` and
            ``keep_best`` are its shorthand: give one or the other. Default: keep all.
        keep_last: Keep this many newest checkpoints (None keeps all).
        keep_best: Also keep this many best checkpoints by ``metric``.
        metric: The metric ranking checkpoints for ``keep_best`` and :meth:`best`.
        mode: ``"max"`` or ``"min"``: which end of ``metric`` is best (needed unless ``metric``
            is one of :data:`cairn.retention.KNOWN_MODES`).
        async_save: Write in a background thread after taking a snapshot.
        filesystem: An fsspec filesystem ``root`` lives on.
        incremental: Reuse unchanged files of the previous checkpoint (same size and digest).
            A file is linked only if it still holds the bytes its manifest records: it is
            read back, once; the next saves of this manager trust it while its device, inode,
            size, mtime and ctime stay the same (any write or ``os.utime`` changes them), up to
            ``recheck_every`` saves (see ``cairn._save.CheckedFiles``).
        recheck_linked_files: Read back every file before it is linked, at every save
            (also those this manager checked before): catches bytes changed underneath the
            filesystem at once, at the cost of reading the whole previous checkpoint per save.
        recheck_every: Every this many saves, one reads every file it links back (bytes
            changed underneath the filesystem keep their stamps). Until a save has done so,
            retention keeps the newest checkpoint that was (one more than the policy
            asks, at most; see docs/format.md, "The retention rule"). Default 8: a 1.2 GB
            replay buffer is read back once per 8 saves. The stamps' ctime already catches
            any change made through the filesystem (``os.utime`` included) at the next save.
        deadline: Seconds each storage call of this manager (a file written, a listing,
            a delete; retries included) may take before it fails with a ``CheckpointError``
            naming the path. Default ``$CAIRN_STORAGE_DEADLINE``, else 60. Restores through
            :meth:`restore_latest` use the same default (set the variable to change it).
        private_key: Sign every checkpoint this manager saves (``cairn sign``'s format, an
            EC private key in PEM as a path or bytes), once committed and before retention
            runs. A failed signing fails the save (the checkpoint stays, unsigned).
        digest: The digest of every file and manifest saved: ``"blake3"`` (default) or
            ``"sha256"`` (recorded in the manifests; restores read either).
        public_key: Accept only checkpoints signed with this key: :meth:`restore_latest`,
            :meth:`load_latest`, :meth:`latest`, :meth:`best` and :meth:`verify` treat an
            unsigned or wrongly signed checkpoint as damaged (skipped with a warning).
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        retention: Policy | None = None,
        keep_last: int | None = None,
        keep_best: int = 0,
        metric: str | None = None,
        mode: Literal["max", "min"] | None = None,
        async_save: bool = False,
        filesystem: Any = None,
        incremental: bool = True,
        recheck_linked_files: bool = False,
        recheck_every: int | None = None,
        deadline: float | None = None,
        private_key: str | os.PathLike[str] | bytes | None = None,
        public_key: str | os.PathLike[str] | bytes | None = None,
        digest: str = "blake3",
    ) -> None:
        """Open (or create) a manager at ``root`` (the arguments: see the class docstring)."""
        self.policy, self._ranking = _policy_of(retention, keep_last, keep_best, metric, mode)
        self.digest = check_digest_algorithm(digest)
        self.storage: Storage
        self.storage, self.root = resolve_storage(root, filesystem, deadline=deadline)
        self._deadline = check_deadline(deadline)  # also bounds a reader's passes against a writer's retention
        self.filesystem = filesystem
        self.async_save = async_save
        self.incremental = incremental
        # Files of earlier steps this manager read back and found sound (per process, never shared).
        self._checked = None if recheck_linked_files else _save.CheckedFiles(_recheck_every(recheck_every))
        # Steps whose save hashed every byte they hold (written, or linked after a read-back):
        # retention keeps the newest of them until a newer one is (WriteStats.fully_checked).
        self._fully_checked: set[int] = set()
        self.last_stats: _save.WriteStats | None = None
        self._lock = threading.Lock()
        self._pending: Future[None] | None = None
        self._error: BaseException | None = None
        self._executor: ThreadPoolExecutor | None = None
        self._buffers = _save.BufferPool()
        self.private_key = private_key
        self.public_key = public_key
        if private_key is not None or public_key is not None:
            from cairn.signing import check_keys

            check_keys(private_key=private_key, public_key=public_key)  # a bad key fails here, not at first use
        self.storage.makedirs(self.root)
        # Leftovers of interrupted saves are removed by the first save, not here: a manager
        # opened only to read (`cairn ls` while training runs) must never delete the files
        # of a save that another process has in flight.
        self._cleaned = False
        if async_save:
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="cairn-save")
            # Pending saves finish before the interpreter exits.
            atexit.register(_shutdown, weakref.ref(self))

    # ------------------------------------------------------------------ listing

    def _path(self, step: int) -> str:
        return self.storage.join(self.root, step_folder_name(step))

    def _scan(self, storage: Storage | None = None) -> list[tuple[int, str]]:
        storage = storage or self.storage
        try:
            names = storage.listdir(self.root)
        except CheckpointError:
            raise
        except OSError as err:
            # The root itself is damaged (a file in its place, no permission): say so, in our terms.
            raise CheckpointError(
                f"Cannot list the checkpoints under {self.storage.uri(self.root)}: {err}. Check that the "
                "path is a folder you can read."
            ) from err
        out = []
        for name in names:
            step = parse_step_folder(name)
            if step is not None:
                out.append((step, name))
        return sorted(out)

    def _open(
        self, step: int, name: str, storage: Storage | None = None, locate: Callable[[str], str] | None = None
    ) -> CheckpointInfo | CheckpointError | None:
        """The checkpoint in folder ``name``: its info, the error that makes it damaged, or None.

        None means not committed (a save in flight or interrupted): not a checkpoint yet.
        ``locate``: the listing's ``storage.locator(root)`` (else the step is located alone).
        """
        return self._open_read(step, name, storage, locate)[0]

    def _open_read(
        self, step: int, name: str, storage: Storage | None = None, locate: Callable[[str], str] | None = None
    ) -> tuple[CheckpointInfo | CheckpointError | None, bytes | None]:
        """:meth:`_open`, and the root manifest's bytes as read (None when none could be read)."""
        storage = storage or self.storage
        path = storage.join(self.root, name)
        reader: _reader.FolderReader | None = None
        try:
            # Where a reader of the step reads it: during a save's switch on an object store, its staging
            # folder (whole); read again where the path leads if the switch finishes meanwhile.
            reader = _reader.FolderReader(storage, (locate or storage.locate)(path), named=path)
            reader, (meta, manifest) = _read_located(reader, lambda r: (r.metadata, r.manifest_bytes()))
            rec = meta.get(MANAGER_KEY)
            rec = rec if isinstance(rec, dict) else {}
            metrics = rec.get("metrics")
            metrics = metrics if isinstance(metrics, dict) else {}
            info = CheckpointInfo(
                step=step,
                path=storage.uri(path),
                # Recorded by older versions under older names, maybe: read under today's.
                metrics=current_metric_names({str(k): v for k, v in metrics.items()}),
                created=str(meta.get("created", "")),
                best_by=_best_by(rec.get("best_by")),
            )
            return info, manifest
        except CheckpointNotFoundError:
            return None, None
        except CheckpointError as err:
            return err, None if reader is None else reader._manifest_bytes

    def _open_settled(
        self, step: int, name: str, locate: Callable[[str], str] | None = None
    ) -> tuple[CheckpointInfo | CheckpointError | None, bytes | None]:
        """:meth:`_open_read`, opened again until two opens in a row agree, within the manager's deadline.

        Another process's retention or save at the same step can take a folder away, or
        replace it, between its root manifest and its metadata: what looks damaged then is
        a race. Damage is what two opens of the same root manifest both find.
        """
        end = time.monotonic() + self._deadline
        found, seen = self._open_read(step, name, None, locate)
        while isinstance(found, CheckpointError):
            again, now = self._open_read(step, name)  # located afresh: a race may have moved it
            if (isinstance(again, CheckpointError) and str(again) == str(found) and now == seen) or (
                time.monotonic() > end
            ):
                return again, now
            found, seen = again, now
        return found, seen

    def _info(
        self, step: int, name: str, storage: Storage | None = None, locate: Callable[[str], str] | None = None
    ) -> CheckpointInfo | None:
        found = self._open(step, name, storage, locate)
        return found if isinstance(found, CheckpointInfo) else None  # damaged: never offered

    def checkpoints(self) -> list[CheckpointInfo]:
        """The committed checkpoints, oldest first, with their steps and metrics.

        Cheap: reads each root manifest and metadata, not the data. A checkpoint whose root
        metadata is damaged is left out; one whose data is damaged is listed (see :meth:`verify`).

        Raises:
            CheckpointError: The root cannot be listed (and no other exception type).
        """
        return self._checkpoints(self.storage)

    def _checkpoints(self, storage: Storage) -> list[CheckpointInfo]:
        infos = []
        locate = storage.locator(self.root)  # the folders above the steps are checked once, not once per step
        for step, name in self._scan(storage):
            info = self._info(step, name, storage, locate)
            if info is not None:
                infos.append(info)
        return infos

    def verify(self, info: CheckpointInfo) -> list[str]:
        """Check every file of a checkpoint against its manifests; the problems found (empty: sound).

        Reads the whole checkpoint. A checkpoint that is gone or unreadable is one problem.
        With ``public_key``, one that is not signed by it, or signed as another step, is one too.

        Raises:
            CheckpointError: The storage failed, so it could not be told whether the checkpoint is sound.
        """
        try:
            self._signed_entry(info)
            return _verify.verify(info.path, self.filesystem)
        except _DAMAGE as err:
            return [str(err)]

    def _signed_entry(self, info: CheckpointInfo) -> FileEntry | None:
        """With ``public_key``: the signed root manifest of ``info``'s checkpoint, checked; else None.

        The one check of a signature on the manager's read path (a restore then reads through
        the entry returned). A signature covers the files, not the folder's name: a signed
        checkpoint copied under another step's folder would verify. So the step the signed
        metadata records must be the folder's (F14; docs/signing.md).

        Raises:
            SignatureError: Not signed by the key, or signed as another step.
        """
        if self.public_key is None:
            return None
        from cairn.signing import signed_root

        entry = signed_root(info.path, self.public_key, filesystem=self.filesystem)
        path = self._path(info.step)
        reader = _reader.FolderReader(self.storage, self.storage.locate(path), expected=entry, named=path)
        rec = _read_located(reader, lambda r: r.metadata)[1].get(MANAGER_KEY)
        signed_step = rec.get("step") if isinstance(rec, dict) else None
        if type(signed_step) is not int or signed_step != info.step:
            raise SignatureError(
                f"{info.path} is signed, but as step {signed_step!r}, not as the step {info.step} its folder is "
                "named for: a signed checkpoint was copied or renamed into this place. It is not used; delete it "
                "or move it back to the step it was saved at."
                if signed_step is not None
                else f"{info.path} is signed, but not as a step of a CheckpointManager (its signed metadata records "
                "none): it was copied into this place. It is not used; save checkpoints here with the manager."
            )
        return entry

    def damaged(self) -> list[tuple[int, str, str]]:
        """Committed step folders left out of :meth:`checkpoints` as damaged: (step, path, why), oldest first.

        Their root manifest or metadata cannot be read (a folder that was never committed is
        not listed: it is a save in flight or interrupted, not damage). Cheap, like
        :meth:`checkpoints`; damage to the data shows only in :meth:`verify`.
        """
        out = []
        locate = self.storage.locator(self.root)
        for step, name in self._scan():
            found, _ = self._open_settled(step, name, locate)
            if isinstance(found, CheckpointError):
                out.append((step, self.storage.uri(self.storage.join(self.root, name)), str(found)))
        return out

    def _read_pointer(self) -> int | None:
        """The step the root's pointer file names (:data:`POINTER`), or None (no pointer, or not a valid one).

        Only a hint that a writer updates after each commit and before its retention: the
        step it names was committed when it was written, and is deleted only after a newer
        step was committed and named. A pointer that cannot be read is no pointer: the
        listing still finds every checkpoint.
        """
        try:
            data = self.storage.read_file(self.storage.join(self.root, POINTER), max_bytes=MAX_POINTER_BYTES)
            body = json.loads(bytes(data))
        except (OSError, ValueError, CorruptCheckpointError):  # FileTooLargeError is a CorruptCheckpointError
            return None
        step = body.get("step") if isinstance(body, dict) else None
        return step if type(step) is int and step >= 0 else None

    def _write_pointer(self, storage: Storage, step: int) -> None:
        """Name ``step`` in the root's pointer file, whole or not at all as readers see it."""
        from cairn.signing import write_atomically

        write_atomically(storage, self.root, POINTER, json.dumps({"step": step}).encode("ascii"))

    def _first_sound(
        self, use: Callable[[CheckpointInfo, FileEntry | None], T], *, warn: bool
    ) -> tuple[CheckpointInfo, T] | None:
        """``use`` the newest checkpoint for which it succeeds; older ones while newer ones are damaged.

        The one home of the fallback rule, and of reading against another process's saves
        and retention (SPEC 8: a reader gets the old checkpoint or the new one, never
        neither). Each pass reads the root's pointer (:meth:`_read_pointer`), lists the
        step folders, and tries the union, newest first. A checkpoint that vanished or
        changed while it was tried (retention, or a save at the same step) is a race, not
        damage: another pass follows. So does a pass that found nothing while the pointer
        or the listing changed under it. None only when a pass found no checkpoint and
        neither changed meanwhile. The passes are bounded by the manager's deadline, not
        counted: each repeats only because a writer committed or deleted something.

        ``use`` gets the checkpoint and, with ``public_key``, its signed root manifest
        (checked once, here); :data:`_DAMAGE` from it skips to an older checkpoint. With
        ``warn``, each one skipped as damaged is logged as a warning on ``cairn.manager``
        (a fallback is not the caller's mistake: nothing in its code would change it).

        Raises:
            CorruptCheckpointError: Checkpoints exist and every one is damaged.
            CheckpointError: The deadline passed while every checkpoint tried vanished.
        """
        end = time.monotonic() + self._deadline
        while True:
            pointer = self._read_pointer()
            listed = self._scan()
            steps = sorted({s for s, _ in listed} | ({pointer} if pointer is not None else set()), reverse=True)
            skipped: list[str] = []
            raced = False
            locate = self.storage.locator(self.root)  # each pass checks the folders above the steps once
            for step in steps:
                name = step_folder_name(step)
                found, seen = self._open_settled(step, name, locate)
                if found is None:
                    # Not committed: a save in flight, or deleted since it was listed or named (then the
                    # pointer or the listing has changed by the end of the pass, and another pass runs).
                    continue
                if isinstance(found, CheckpointError):
                    path, reason = self.storage.uri(self.storage.join(self.root, name)), found
                else:
                    try:
                        used = use(found, self._signed_entry(found))
                        _LOG.info("used %s (step %d), the newest checkpoint that loads", found.path, found.step)
                        return found, used
                    except _DAMAGE as err:
                        if self._open_read(step, name)[1] != seen:
                            raced = True  # deleted or replaced while it was read: newer checkpoints exist
                            break
                        path, reason = found.path, err
                skipped.append(f"{path}: {reason}")
                if warn:
                    _LOG.warning("skipped the damaged checkpoint %s; falling back to an older one. %s", path, reason)
            if not raced and self._read_pointer() == pointer and self._scan() == listed:
                break  # nothing changed while this pass ran: what it found is the answer
            if time.monotonic() > end:
                raise CheckpointError(
                    f"Every checkpoint under {self.storage.uri(self.root)} that was tried was deleted or replaced "
                    f"while it was being read, for {self._deadline:.0f} s (the manager's deadline): another process "
                    "saves faster than this one reads, with a short retention. Try again, or read while that "
                    "process is paused."
                )
        if skipped:
            raise CorruptCheckpointError(
                f"Every checkpoint under {self.storage.uri(self.root)} is damaged, none can be restored "
                f"({len(skipped)}): " + " | ".join(skipped) + " Check them with `cairn ls --verify`."
            )
        return None

    def latest_info(self, *, verified: bool = True) -> CheckpointInfo | None:
        """The newest committed checkpoint that verifies, with its step and metrics, or None.

        Against a writer's retention it gives the old checkpoint or the new one, never None
        while a checkpoint exists (see :meth:`restore_latest`).

        Args:
            verified: True (the default, SPEC 6): the newest one whose every file matches its
                checksum; each checkpoint tried is read in full, newest first, and damaged ones
                are skipped. False: the newest committed one, reading only its root manifest and
                metadata (cheap, for listings; its data may be damaged). To load the newest good
                checkpoint, :meth:`restore_latest` / :meth:`load_latest` verify while they read,
                in one pass.
        """

        def check(info: CheckpointInfo, _entry: FileEntry | None) -> None:
            if verified:
                problems = _verify.verify(info.path, self.filesystem)
                if problems:
                    raise CorruptCheckpointError(problems[0])

        try:
            found = self._first_sound(check, warn=False)
        except CorruptCheckpointError:
            return None  # every one damaged: none verifies
        return None if found is None else found[0]

    def latest(self, *, verified: bool = True) -> str | None:
        """The path of the newest committed checkpoint, or None (``verified``: see :meth:`latest_info`)."""
        info = self.latest_info(verified=verified)
        return None if info is None else info.path

    def best(self, *, verified: bool = True) -> str | None:
        """The path of the best committed checkpoint by ``metric`` (None without one).

        Args:
            verified: True (the default): the best one that verifies (damaged ones are
                skipped, best first). False: by the recorded metrics alone, reading no data.
        """
        from cairn.retention import best_steps

        if self._ranking is None:
            return None
        infos = self.checkpoints()
        ranked = best_steps(
            [(i.step, i.metrics) for i in infos], self._ranking.metric, self._ranking.better, len(infos)
        )
        by_step = {i.step: i for i in infos}
        for step in ranked:
            if not verified or not self.verify(by_step[step]):
                return by_step[step].path
        return None

    def load_latest(self, load: Callable[[CheckpointInfo], T]) -> tuple[CheckpointInfo, T] | None:
        """Call ``load`` on the newest checkpoint, falling back to older ones while they are damaged.

        ``load`` must verify what it reads before using it (``restore_from_path`` and
        ``from_checkpoint`` do), so a damaged checkpoint is never applied. Each checkpoint
        skipped is named, with the reason, in a warning logged on ``cairn.manager``. Only damage
        (:class:`CorruptCheckpointError`, or a checkpoint that vanished) moves on to an older one;
        any other error of ``load`` is raised. With ``public_key``, the signature is checked
        before ``load`` is called. Against a writer's retention: see :meth:`restore_latest`.

        Returns:
            The checkpoint used and what ``load`` returned, or None when there is no checkpoint.

        Raises:
            CorruptCheckpointError: Every checkpoint is damaged; the message lists them.
        """
        self.wait()  # a save still in flight would be the newest
        return self._first_sound(lambda info, _entry: load(info), warn=True)

    def restore_latest(self, obj: Checkpointable, *, allow_pickle: bool = False) -> CheckpointInfo | None:
        """Restore ``obj`` from the newest checkpoint that verifies; return it (None if there is none).

        Damaged checkpoints are skipped with a warning logged for each (see
        :meth:`load_latest`); nothing of a damaged checkpoint is applied to ``obj``. A
        restore racing another process's saves and retention gets the old checkpoint or the
        new one, never None while one exists: the root's pointer file, which a writer
        updates after each commit and before its retention, is read with the listing, and
        a checkpoint deleted while it was read is a race that starts another pass (bounded
        by the manager's ``deadline``). With ``public_key``, the signature is checked once
        and the restore reads through the signed root manifest.

        Raises:
            CorruptCheckpointError: Every checkpoint is damaged.
        """
        _require_checkpointable(obj, "restore_latest")  # also when there is nothing to restore yet

        def load(info: CheckpointInfo, entry: FileEntry | None) -> None:
            # Checkpointable.restore_from_path's own path, with the signature already checked.
            obj._restore_checkpoint(
                info.path,
                component=None,
                filesystem=self.filesystem,
                allow_pickle=allow_pickle,
                built_from=None,
                signed_root=entry,
            )

        self.wait()  # a save still in flight would be the newest
        found = self._first_sound(load, warn=True)
        return None if found is None else found[0]

    # ------------------------------------------------------------------ saving

    def save(
        self, obj: Checkpointable, step: int, metrics: dict[str, Any] | None = None, *, allow_pickle: bool = False
    ) -> str:
        """Save ``obj`` as the checkpoint of ``step``; returns its path.

        With ``async_save`` the state is snapshotted and the call returns before
        the write; the error of a failed background save is raised by
        :meth:`wait` or by the next ``save``.

        Raises:
            CheckpointError: A bad step, an unsavable value, or an earlier async failure.
        """
        _require_checkpointable(obj, "save")
        if type(step) is not int or step < 0:
            raise CheckpointError(f"CheckpointManager.save: step must be an int >= 0, got {step!r}.")
        self.wait()  # at most one save in flight; raises a previous failure
        began = time.monotonic()  # this save's one deadline counts from here, not from a previous save's wait
        clean_metrics = jsonable_metrics(metrics)
        record: dict[str, Any] = {"step": step, "metrics": clean_metrics}
        if self._ranking is not None:
            # What best() ranks by, so that a reader without this manager's arguments (cairn ls) ranks alike.
            record["best_by"] = {"metric": self._ranking.metric, "mode": self._ranking.better}
        extra = {MANAGER_KEY: record}
        plan = _save.plan_checkpoint(obj, state=None, allow_pickle=allow_pickle, extra_metadata=extra)
        # An async save copies every byte the state still owns before it returns (whatever container the
        # codec found an array in: snapshot_plan); training may change anything from then on.
        taken = _save.snapshot_plan(plan, self._buffers) if self.async_save else []
        final = self._path(step)
        # One deadline for the whole save (its cleanup, writes and retention), not one per call.
        storage = self.storage.bounded(_save.plan_bytes(plan), since=began)
        if not self._cleaned:
            self._cleaned = self._cleanup_uncommitted(storage)
        # Delegated folders (cairn.delegation) are started here, before an async save returns:
        # each delegate takes its state now, while training waits.
        started = _save.start_write(storage, final, plan, digest=self.digest) if _save.has_delegates(plan) else None
        if self._executor is None:
            self._write(plan, step, final, taken, started, storage)
        else:
            with self._lock:
                self._pending = self._executor.submit(self._write, plan, step, final, taken, started, storage)
        return self.storage.uri(final)

    def _write(
        self,
        plan: Any,
        step: int,
        final: str,
        taken: list[Any],
        started: _save.StartedWrite | None,
        storage: Storage,
    ) -> None:
        try:
            self._write_plan(plan, step, final, started, storage)
        finally:
            # The plan holds views of the snapshot; drop it before the buffers are reused.
            del plan
            if taken:
                self._buffers.give_back(taken)

    def _write_plan(
        self, plan: Any, step: int, final: str, started: _save.StartedWrite | None, storage: Storage
    ) -> None:
        previous = None
        try:
            if self.incremental:
                prev = [s for s, _ in self._scan(storage) if s != step]
                locate = storage.locator(self.root)
                for s in reversed(prev):
                    path = self._path(s)
                    try:
                        # Read where a restore of the step would (during a switch over it on an object store,
                        # its staging folder, whole): the path itself has no root manifest until the copy ends.
                        reader = _reader.FolderReader(storage, locate(path), named=path)
                        reader.manifest  # noqa: B018 - committed only
                    except CheckpointError:
                        continue
                    previous = reader
                    break
        except BaseException:
            if started is not None:  # the delegates already write into the claimed staging place
                started.abort()
            raise
        stats = _save.WriteStats()
        if self._checked is not None:
            self._checked.new_save()
        _save.commit_plan(
            storage,
            final,
            plan,
            previous=previous,
            stats=stats,
            started=started,
            checked=self._checked,
            digest=self.digest,
        )
        self.last_stats = stats
        _LOG.debug(
            "saved %s: %d files written (%d bytes), %d linked from the previous checkpoint (%d bytes, %d read back)",
            self.storage.uri(final),
            stats.files_written,
            stats.bytes_written,
            stats.files_linked,
            stats.bytes_linked,
            stats.bytes_reread,
        )
        committed = stats.root
        assert committed is not None  # commit_plan records it once committed
        if not self._seal(storage, step, final, committed):
            self._fully_checked.discard(step)
            return
        # Named before retention runs: a reader that finds an older step deleted finds this one named.
        self._write_pointer(storage, step)
        if stats.previous_damaged and previous is not None:
            # Found damaged: retention must not keep it as the newest checkpoint that verifies.
            self._fully_checked -= {s for s in self._fully_checked if self._path(s) == previous.folder}
        if stats.fully_checked:
            self._fully_checked.add(step)
        else:
            self._fully_checked.discard(step)  # a step saved again over an earlier one
        self._apply_retention(just_saved=step, storage=storage)
        if self._checked is not None:
            # The links this save made and the deletes of retention changed the ctimes of the
            # files it linked; take them now, so that only a change made by others is seen.
            self._checked.refresh(lambda rel: self.storage.stamp(self.storage.join(final, rel)))

    def _seal(self, storage: Storage, step: int, final: str, committed: FileEntry) -> bool:
        """Check that ``final`` holds what this save committed, and sign it; False when it is gone.

        Gone: committed, then deleted by another writer's retention on this root (a newer
        step exists): nothing of it is left to sign, name or count.

        Raises:
            CheckpointError: The folder holds another writer's checkpoint (saved at the same step).
        """
        # The engine read back every byte it wrote before the root manifest (a save never commits
        # bytes that fail their own digest, so retention never counts such a checkpoint). What is
        # left to ask is whether the step folder still holds what this save committed.
        holds = _holds(storage, final, committed)
        if holds is None:
            # Committed, then deleted by another writer's retention on this root (a newer step exists):
            # nothing of it is left to sign, name or count.
            return False
        if not holds:
            raise CheckpointError(
                f"The checkpoint this save committed at {self.storage.uri(final)} is no longer there (the folder "
                "holds another root manifest): another writer saved at the same step meanwhile. Give each writer "
                "its own root or its own steps."
            )
        if self.private_key is not None:
            from cairn.signing import sign_checkpoint

            # What this save committed (its root manifest seals every digest below it), never what
            # the folder holds by then: another writer may have saved at the same step meanwhile.
            try:
                sign_checkpoint(
                    final, self.private_key, filesystem=self.filesystem, check_files=False, committed=committed
                )
            except CheckpointError:
                if _holds(storage, final, committed) is not None:
                    raise
                return False  # deleted by another writer's retention meanwhile: nothing to sign (see above)
        return True

    def _apply_retention(self, *, just_saved: int, storage: Storage) -> None:
        infos = self._checkpoints(storage)
        entries = [(i.step, i.metrics) for i in infos]
        paths = {i.step: i for i in infos}
        # Never delete the newest checkpoint that verifies. A step this manager saved counts as
        # verified when its save hashed every byte it holds (written, or linked after reading
        # it back); one that linked files on the word of their stamps does not (a byte flipped
        # underneath the filesystem keeps the stamp), and the newest fully checked step is
        # kept until a newer one is. So when the step just saved is the newest, as it almost
        # always is, this reads nothing; otherwise it checks from the newest down.
        verdicts: dict[int, bool | None] = {}
        if just_saved in paths and just_saved not in self._fully_checked:
            checked = [s for s in self._fully_checked if s in paths]
            if checked:
                newest = max(checked)
                # Newer steps (linked by stamp) are "not known to verify": kept by policy only.
                verdicts = {s: s == newest for s in paths if s >= newest}
        elif just_saved in paths:
            verdicts = {just_saved: True}
        while (step := next_to_verify(entries, self.policy, verdicts)) is not None:
            try:
                verdicts[step] = not self.verify(paths[step])
            except CheckpointError:
                verdicts[step] = None  # could not tell (storage failing): keep it
        keep = steps_to_keep(entries, self.policy, verified=verdicts)
        keep.add(just_saved)
        for info in infos:
            if info.step not in keep:
                storage.remove_tree(self._path(info.step))
                _LOG.info("retention deleted %s (kept %s)", info.path, self.policy)
        self._fully_checked &= keep

    def _cleanup_uncommitted(self, storage: Storage) -> bool:
        """Remove what interrupted saves left under the root; True when the storage could be asked.

        Staging folders, half-deleted folders and step folders without a committed
        manifest go, but never another writer's save in flight: the storage removes
        one only once its writer is gone (process ended, or heartbeat stale; see
        ``cairn.storage.writers``). A storage that fails here does not fail the save.
        """
        try:
            storage.remove_leftovers(self.root, lambda name: parse_step_folder(name) is not None)
        except CheckpointError:
            return False
        return True

    def wait(self) -> None:
        """Block until the pending save (if any) is committed; raise its error if it failed."""
        with self._lock:
            pending, self._pending = self._pending, None
        if pending is not None:
            err = pending.exception()
            if err is not None:
                raise CheckpointError(f"An asynchronous checkpoint save failed: {err}") from err

    def close(self) -> None:
        """Wait for pending saves and stop the background writer."""
        try:
            self.wait()
        finally:
            if self._executor is not None:
                self._executor.shutdown(wait=True)
                self._executor = None

    def __enter__(self) -> CheckpointManager:
        """Use as a context manager; pending saves finish on exit."""
        return self

    def __exit__(self, *exc: object) -> None:
        """Wait for pending saves."""
        self.close()


def _read_located(
    reader: _reader.FolderReader, read: Callable[[_reader.FolderReader], T]
) -> tuple[_reader.FolderReader, T]:
    """``read(reader)`` of a reader opened where ``Storage.locate`` sent it, once more if a switch moved it.

    On an object store a save over the step switches its new checkpoint into place: a
    reader sent to the staging folder finds it deleted once the switch is done, and one
    that read the step itself finds its files going once the switch began. Either is read
    again where the path leads now (the new checkpoint), never reported as missing or
    damaged. Anything else (a step not committed, damage) is the answer, at once.
    """
    try:
        return reader, read(reader)
    except (CheckpointNotFoundError, CorruptCheckpointError):
        named = reader.named if reader.named is not None else reader.folder
        if reader.storage.locate(named) == reader.folder:
            raise
    again = reader.reopened()
    return again, read(again)


def _holds(storage: Storage, final: str, committed: FileEntry) -> bool | None:
    """Whether ``final`` holds the root manifest ``committed``; None when it holds no committed checkpoint."""
    try:
        data = _reader.FolderReader(storage, final).manifest_bytes()
    except CheckpointNotFoundError:
        return None
    except CorruptCheckpointError:
        return False
    return len(data) == committed.size and Digest.of(data, committed.digest.algorithm) == committed.digest


def _policy_of(
    retention: Policy | None,
    keep_last: int | None,
    keep_best: int,
    metric: str | None,
    mode: Literal["max", "min"] | None,
) -> tuple[Policy, KeepBest | None]:
    """The manager's retention policy and the ranking of its ``best()``, from ``retention`` or its shorthand."""
    if retention is not None and (keep_last is not None or keep_best):
        raise CheckpointError(
            "CheckpointManager: give retention= or its shorthand keep_last=/keep_best=, not both "
            "(e.g. retention=KeepLast(3) | KeepBest(1, metric))."
        )
    if retention is not None and not callable(getattr(retention, "keep", None)):
        raise CheckpointError(
            f"CheckpointManager: retention must be a policy with keep(entries) -> set[int] (cairn.retention), "
            f"got {type(retention).__name__}."
        )
    try:
        policy: Policy = (
            retention
            if retention is not None
            else RetentionPolicy(keep_last=keep_last, keep_best=keep_best, metric=metric, mode=mode)
        )
        # best() ranks by the policy's KeepBest, else by metric= (which may be given alone).
        return policy, ranking(policy) or (KeepBest(0, metric, mode) if metric else None)
    except ValueError as err:
        raise CheckpointError(f"CheckpointManager: {err}") from err


def _require_checkpointable(obj: object, method: str) -> None:
    """Raise CheckpointError unless ``obj`` is a :class:`~cairn.Checkpointable`, saying what to pass instead.

    A PyTorch loop's first try is the model or a dict of its parts: without this check it
    fails deep inside the save with an AttributeError.
    """
    from cairn.checkpointable import Checkpointable

    if isinstance(obj, Checkpointable):
        return
    kind = type(obj)
    raise CheckpointError(
        f"CheckpointManager.{method} takes a cairn.Checkpointable, got {kind.__module__}.{kind.__qualname__}. "
        "In a PyTorch loop pass cairn.torch.TrainState(model=model, optimizer=optimizer, ...) (any objects with "
        "state_dict(), and plain values); else subclass cairn.Checkpointable (docs/integrations.md)."
    )


def _best_by(recorded: Any) -> tuple[str, Literal["max", "min"]] | None:
    """A checkpoint's recorded ranking (``{"metric", "mode"}``), or None when absent or not of that form.

    Read from a file: only a metric name of a sane length and one of the two modes pass
    (anything else is left unused, as an older manager's missing record is).
    """
    if not isinstance(recorded, dict):
        return None
    metric, mode = recorded.get("metric"), recorded.get("mode")
    if not isinstance(metric, str) or not 0 < len(metric) <= _MAX_METRIC_NAME:
        return None
    if mode == "max":
        return metric, "max"
    if mode == "min":
        return metric, "min"
    return None


def _recheck_every(value: int | None) -> int:
    """``recheck_every`` checked (None: :data:`RECHECK_EVERY`)."""
    if value is None:
        return RECHECK_EVERY
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise CheckpointError(f"CheckpointManager: recheck_every must be an int >= 1, got {value!r}.")
    return value


def _shutdown(ref: weakref.ref[CheckpointManager]) -> None:
    mgr = ref()
    if mgr is not None and mgr._executor is not None:
        try:
            mgr.close()
        except CheckpointError as err:
            from cairn._display import safe_text

            # At exit, with nobody left to raise to. The message may quote a hostile path. Shown on
            # stderr also where nothing configured logging (logging's last-resort handler).
            _LOG.error("a checkpoint save failed at exit: %s", safe_text(err))

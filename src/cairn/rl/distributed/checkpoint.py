"""The remote side of checkpoints: Ray actors write and read their folders through the engine's hook.

The groups with actors are delegates (:class:`cairn.delegation.DelegatedComponent`)
of the folders their actors hold: the
:class:`~cairn.rl.core.learner.learner_group.LearnerGroup` delegates ``learner`` to its
:class:`~cairn.rl.distributed.learners.RemoteLearners`, the
:class:`~cairn.rl.algorithms.algorithm.Algorithm` delegates ``env_runner`` to the
:class:`~cairn.rl.distributed.env_runners.RemoteEnvRunners`. The engine does
the rest (staging, manifests, commit, verification, apply only when every read
passed); each actor writes its folder with :func:`cairn.delegation.write_folder`
straight to the storage (no large state passes through the driver), and reads
and verifies it with :func:`cairn.delegation.read_folder`, in parallel with the
others, keeping it until the engine says to apply or drop it.

The layout on disk is exactly that of a local checkpoint: a checkpoint from a
Ray run restores without Ray, and the reverse.

Storage must be reachable from the actors: a local path (the actors run on
this machine, or the path is on a shared filesystem) or an object store. For a
``memory://`` filesystem (private to each process) a group writes and reads
the folder in the driver instead (the storage's ``shared_between_processes``
capability says so), with the state it gathers from, and hands back to, its actors.

Both groups share one copy of this protocol: :class:`ActorFolderDelegate` is
the driver side (start a save, start a load in every actor, apply or drop),
:class:`FolderActor` the actor side (write, read and keep, apply or drop).
Each group says only what differs: which actor writes, with what state, and
how a state read in the driver reaches its actors.

Credentials. The storage travels in every call's arguments, but not its filesystem:
the driver puts the filesystem in Ray's object store once per group and filesystem
(:class:`ObjectStoreFilesystem`), and the actors' calls carry the reference, which
each actor resolves once. An ``s3fs`` built with ``key=``/``secret=`` keeps them in
its pickle; this way the secret is never in a call's arguments (Ray keeps those in
task specs, retries and failure reports), only in the object store, which holds it
for the cluster's own processes while the group lives. A filesystem built without
a secret (an ``s3://`` URI, or an s3fs without ``key``) carries none: each actor
finds credentials in its own environment, and says so when it has none.
"""

from __future__ import annotations

import abc
import dataclasses
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from cairn.delegation import DelegatedFolder, LoadedComponent, SharedRead, Waiter, adopt_read, read_folder, write_folder
from cairn.storage.fsspec_storage import FsspecStorage

if TYPE_CHECKING:
    from cairn.checkpointable import Checkpointable
    from cairn.manifest import FileEntry

__all__ = ["ActorFolderDelegate", "FolderActor", "ObjectStoreFilesystem", "nest_state"]

_RESOLVED_MAX = 4
"""Filesystems an actor keeps resolved (one per storage a run saves to, usually one)."""
_resolved: OrderedDict[str, Any] = OrderedDict()
_resolved_lock = threading.Lock()


class ObjectStoreFilesystem:
    """A filesystem in Ray's object store: what actors' calls carry instead of the filesystem itself.

    Picklable (it holds the ``ObjectRef``, which Ray counts as borrowed while a call holds
    it); :meth:`resolve` fetches the filesystem once per process and reference.
    """

    def __init__(self, ref: Any) -> None:
        """Hold ``ref``, the ``ObjectRef`` of a filesystem ``ray.put`` by the driver."""
        self.ref = ref

    def resolve(self) -> Any:
        """The filesystem (fetched from the object store on the first call in this process)."""
        import ray

        key = self.ref.hex()
        with _resolved_lock:
            fs = _resolved.get(key)
            if fs is not None:
                _resolved.move_to_end(key)
                return fs
        fs = ray.get(self.ref)
        with _resolved_lock:
            _resolved[key] = fs
            while len(_resolved) > _RESOLVED_MAX:
                _resolved.popitem(last=False)
        return fs


class FolderActor(abc.ABC):
    """The actor side of a delegated folder: write it, read and keep it, then apply or drop it.

    The base of :class:`~cairn.rl.distributed.learners.LearnerActor` and
    :class:`~cairn.rl.distributed.env_runners.EnvRunnerActor`; the subclass names
    the component the folder belongs to (:attr:`checkpoint_target`).
    """

    def __init__(self) -> None:
        self._pending: LoadedComponent | None = None
        self._save_delay_s = 0.0

    @property
    @abc.abstractmethod
    def checkpoint_target(self) -> Checkpointable:
        """The component whose folder this actor writes and reads."""

    def inject_save_delay(self, seconds: float) -> None:
        """Fault injection for tests: make the next checkpoint write wait ``seconds`` first."""
        self._save_delay_s = float(seconds)

    def _write(
        self,
        folder: DelegatedFolder,
        *,
        allow_pickle: bool,
        make_state: Callable[[], dict[str, Any]] | None = None,
    ) -> FileEntry:
        """Write the folder, with the state ``make_state`` gives (default: the target's own ``get_state``)."""
        if self._save_delay_s:
            delay, self._save_delay_s = self._save_delay_s, 0.0
            time.sleep(delay)
        state = None if make_state is None else make_state()
        return write_folder(self.checkpoint_target, folder, allow_pickle=allow_pickle, state=state)

    def load(self, folder: DelegatedFolder, *, component: str | None, allow_pickle: bool) -> None:
        """Read and verify the folder; keep it until :meth:`apply_loaded` or :meth:`drop_loaded`."""
        self._pending = read_folder(self.checkpoint_target, folder, component=component, allow_pickle=allow_pickle)

    def load_shared(self, folder: DelegatedFolder, *, component: str | None, allow_pickle: bool) -> tuple[bool, Any]:
        """:meth:`load`, and what it read for the actors of this node that hold the same state.

        Called with ``num_returns=2``: the first result (True) is what the driver waits for,
        the second goes, by reference, to :meth:`adopt_loaded` of the others (through the
        node's object store: the driver never fetches it).
        """
        self.load(folder, component=component, allow_pickle=allow_pickle)
        assert self._pending is not None  # load keeps what it read
        return True, self._pending.shared()

    def adopt_loaded(self, shared: SharedRead) -> None:
        """Keep what another actor of the same state read (:meth:`load_shared`), as :meth:`load` would."""
        self._pending = adopt_read(self.checkpoint_target, shared)

    def apply_loaded(self) -> None:
        """Apply what :meth:`load` read (see :meth:`_apply`)."""
        pending, self._pending = self._pending, None
        if pending is not None:
            self._apply(pending)

    def _apply(self, pending: LoadedComponent) -> None:
        """Apply a folder read by :meth:`load`; a subclass may take only its share of it."""
        pending.apply()

    def drop_loaded(self) -> None:
        """Forget what :meth:`load` read."""
        self._pending = None


class ActorFolderDelegate(abc.ABC):
    """The driver side of a folder a group of actors writes and reads: a :class:`~cairn.delegation.DelegatedComponent`.

    One actor writes the folder, every actor reads and verifies it in parallel,
    and nothing is applied until the engine says so. When the actors cannot reach
    the storage (``memory://``, private to each process) the driver writes the
    folder from :attr:`local` with the state it gathers, and reads it there and
    hands the state to the actors. Every call to the actors has the checkpoint
    deadline (:meth:`_get_in_time`).
    """

    actors: list[Any]
    """The Ray actor handles (each a :class:`FolderActor`)."""

    local: Checkpointable
    """The driver's copy of the component (the folder's shape; for some groups also their totals)."""

    _driver_read: tuple[LoadedComponent, str | None] | None = None
    _shared_fs: tuple[Any, ObjectStoreFilesystem] | None = None  # the filesystem put once, and its reference

    def _for_actors(self, folder: DelegatedFolder) -> DelegatedFolder:
        """``folder`` as the actors' calls carry it: its filesystem by reference (see the module's Credentials)."""
        storage = folder.storage
        if not isinstance(storage, FsspecStorage):
            return folder  # a local path: nothing secret in it
        if self._shared_fs is None or self._shared_fs[0] is not storage.fs:
            import ray

            self._shared_fs = (storage.fs, ObjectStoreFilesystem(ray.put(storage.fs)))
        return dataclasses.replace(folder, storage=storage.by_reference(self._shared_fs[1]))

    @property
    @abc.abstractmethod
    def restores_local_copy(self) -> bool:
        """See :attr:`cairn.delegation.DelegatedComponent.restores_local_copy`."""

    @abc.abstractmethod
    def label(self, position: int) -> str:
        """How messages name the actor at ``position``."""

    @abc.abstractmethod
    def _get_in_time(self, calls: list[tuple[str, Any]], *, doing: str) -> list[Any]:
        """The results of ``calls`` within the checkpoint deadline; actors that miss it are stopped."""

    @abc.abstractmethod
    def _prepare(self, *, loading: bool) -> None:
        """Make the group ready for a save or a load (replace dead actors, finish calls in flight)."""

    @abc.abstractmethod
    def _start_actor_save(self, folder: DelegatedFolder, *, allow_pickle: bool) -> tuple[str, Any]:
        """Start the writing actor's save; its label and the reference to its ``FileEntry``."""

    @abc.abstractmethod
    def _driver_state(self) -> dict[str, Any]:
        """The folder's state gathered in the driver (for storage the actors cannot reach)."""

    @abc.abstractmethod
    def _apply_driver_read(self, loaded: LoadedComponent, component: str | None) -> None:
        """Give the actors what the driver read (``component``: the subcomponent read, None for all)."""

    def start_save(self, folder: DelegatedFolder, *, allow_pickle: bool) -> Waiter:
        """One actor writes the folder (the driver, when the actors cannot reach the storage)."""
        self._prepare(loading=False)
        if not folder.storage.shared_between_processes:
            entry = write_folder(self.local, folder, allow_pickle=allow_pickle, state=self._driver_state())
            return lambda: entry
        label, ref = self._start_actor_save(self._for_actors(folder), allow_pickle=allow_pickle)
        return lambda: self._get_in_time([(label, ref)], doing="writing its part of a checkpoint")[0]

    def start_load(self, folder: DelegatedFolder, *, component: str | None, allow_pickle: bool) -> Waiter:
        """Every actor reads and verifies the folder itself, in parallel (or the driver reads it)."""
        self._prepare(loading=True)
        if not folder.storage.shared_between_processes:  # the driver reads; finish_load hands the state over
            loaded = read_folder(self.local, folder, component=component, allow_pickle=allow_pickle)
            self._driver_read = (loaded, component)
            return lambda: None
        refs = self._start_actor_loads(self._for_actors(folder), component=component, allow_pickle=allow_pickle)
        return lambda: self._get_in_time(refs, doing="reading its part of a checkpoint")

    def _start_actor_loads(
        self, folder: DelegatedFolder, *, component: str | None, allow_pickle: bool
    ) -> list[tuple[str, Any]]:
        """Start every actor's read of ``folder``; each actor's label and the reference to wait for."""
        return [
            (self.label(i), a.load.remote(folder, component=component, allow_pickle=allow_pickle))
            for i, a in enumerate(self.actors)
        ]

    def finish_load(self, *, apply: bool) -> None:
        """Apply (or drop) what every actor (or the driver) read."""
        if self._driver_read is not None:
            (loaded, component), self._driver_read = self._driver_read, None
            if apply:
                self._apply_driver_read(loaded, component)
            return
        method = "apply_loaded" if apply else "drop_loaded"
        refs = [(self.label(i), getattr(a, method).remote()) for i, a in enumerate(self.actors)]
        self._get_in_time(refs, doing="applying a restored checkpoint")


def nest_state(component: str | None, state: dict[str, Any]) -> dict[str, Any]:
    """``state`` of the subcomponent at ``component`` (``/``-joined) as a state of the whole component.

    ``nest_state("rl_module/p0", s) == {"rl_module": {"p0": s}}``; a ``set_state``
    leaves the keys it lacks as they are.
    """
    if not component:
        return state
    for name in reversed(component.strip("/").split("/")):
        state = {name: state}
    return state

"""The protocol between the engine and the delegate of a delegated folder (see :mod:`cairn.delegation`).

The engine (:mod:`cairn._save`, :mod:`cairn._restore`) imports this module and
nothing above it; the delegate side (``write_folder``, ``read_folder``) lives
above the engine, in :mod:`cairn.delegation`, which re-exports these names.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from cairn.manifest import DIGEST_ALGORITHM, FileEntry

if TYPE_CHECKING:
    from cairn.storage.base import Storage

__all__ = ["DelegatedComponent", "DelegatedFolder", "Once", "Waiter"]

Waiter = Callable[[], Any]
"""Blocks until a delegate's work is done; returns its result or raises its error.

The engine calls it exactly once. It must give up (raise a ``CheckpointError``
naming what it waited for) rather than block forever.
"""


@dataclass(frozen=True)
class DelegatedFolder:
    """Where a delegated component's folder is, for the delegate (picklable: it may travel).

    Attributes:
        storage: The checkpoint's storage.
        path: The folder, on ``storage``. On save, inside the staging place.
        root: The staging place (save) or the folder the restore was opened at;
            on storage with local paths, a delegate that cannot see it is on
            another filesystem and refuses with a clear error.
        component: The folder's component path in the checkpoint (for messages).
        digest: On save, the digest algorithm of the checkpoint (a tree uses one).
        expected: On restore, the entry of the folder's ``manifest.json`` that the
            parent's manifest records (None when ``path`` is the restore's own
            folder and no parent seals it); the delegate's read checks it.
    """

    storage: Storage
    path: str
    root: str
    component: str
    expected: FileEntry | None = None
    digest: str = DIGEST_ALGORITHM  # on save: the checkpoint's digest, which the folder's files use too

    def uri(self) -> str:
        """The folder as a user names it (with the protocol on remote storage)."""
        return self.storage.uri(self.path)


class DelegatedComponent(Protocol):
    """Someone else who writes and reads one component folder of a checkpoint.

    Offered by the component's owner through
    :meth:`~cairn.Checkpointable.get_delegated_components`. See
    :mod:`cairn.delegation` for the order of calls.
    """

    @property
    def restores_local_copy(self) -> bool:
        """Whether the engine also restores the owner's own component object from the folder.

        True when that object holds something of its own (group totals, say); False
        when it is only the shape of what the delegate holds (class, constructor,
        components), which the engine then neither reads nor applies.
        """

    def start_save(self, folder: DelegatedFolder, *, allow_pickle: bool) -> Waiter:
        """Start writing the component's checkpoint folder at ``folder.path``.

        Take the state before returning. The waiter returns the
        :class:`~cairn.manifest.FileEntry` of the folder's ``manifest.json``
        (what :func:`cairn.delegation.write_folder` returns).
        """

    def start_load(self, folder: DelegatedFolder, *, component: str | None, allow_pickle: bool) -> Waiter:
        """Start reading and verifying ``folder``, applying nothing yet (:func:`cairn.delegation.read_folder`).

        With ``component`` (a ``/``-joined path below the delegated component),
        ``folder`` is the folder of that subcomponent and only it is restored.
        """

    def finish_load(self, *, apply: bool) -> None:
        """Apply what :meth:`start_load` read, or with ``apply=False`` drop it."""


class Once:
    """A waiter that runs once and then returns (or raises) the same outcome.

    The engine waits for a delegate both on the way through and again when it
    cleans up after a failure; the delegate's waiter itself runs only once.
    """

    def __init__(self, fn: Waiter) -> None:
        """Wrap the delegate's waiter ``fn``."""
        self._fn: Waiter | None = fn
        self._result: Any = None
        self._error: BaseException | None = None

    def __call__(self) -> Any:
        """Run the wrapped waiter the first time; return or raise its outcome every time."""
        if self._fn is not None:
            fn, self._fn = self._fn, None
            try:
                self._result = fn()
            except BaseException as err:
                self._error = err
        if self._error is not None:
            raise self._error
        return self._result

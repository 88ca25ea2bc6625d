"""The exceptions cairn raises on purpose.

Every error derives from :class:`CheckpointError`; some also derive from the
built-in exception a caller already catches::

    Exception
    └── CheckpointError
        ├── CheckpointNotFoundError        (also FileNotFoundError)
        ├── CorruptCheckpointError
        │   └── SignatureError             (cairn.signing: missing, wrong or not matching the files)
        ├── UnsafeCheckpointError
        ├── IncompatibleCheckpointError
        ├── MissingCallableError           (a callable the checkpoint could not record: pass it again)
        └── ComponentNotFoundError         (also KeyError)

Messages are full sentences: what went wrong, where (path, component, file or
key), what was expected and found, and what to do about it. Underlying causes
are chained with ``raise ... from err``.

A damaged checkpoint that a fallback skipped (``restore_latest``, ``cairn train
--resume``) is not an error and not a warning of the ``warnings`` module (which is
for calls to change): it is logged on ``cairn.manager`` (docs/cli.md, "Logging").
"""

from __future__ import annotations

__all__ = [
    "CheckpointError",
    "CheckpointNotFoundError",
    "ComponentNotFoundError",
    "CorruptCheckpointError",
    "IncompatibleCheckpointError",
    "MissingCallableError",
    "SignatureError",
    "UnsafeCheckpointError",
]


class CheckpointError(Exception):
    """Root of every error cairn raises on purpose."""


class CheckpointNotFoundError(CheckpointError, FileNotFoundError):
    """There is no committed checkpoint at the given path."""

    def __str__(self) -> str:
        # FileNotFoundError formats (errno, strerror) pairs; we always pass one message.
        return str(self.args[0]) if self.args else ""


class UnreadableCheckpointError(CheckpointError, PermissionError):
    """A file or folder of the checkpoint exists but this process may not read it (its permissions).

    The message names the path and says what to do; it is a ``PermissionError`` too, so
    code that caught the raw ``PermissionError`` before still catches it.
    """

    def __str__(self) -> str:
        # PermissionError formats (errno, strerror) pairs; we always pass one message.
        return str(self.args[0]) if self.args else ""


class CorruptCheckpointError(CheckpointError):
    """A file of the checkpoint is truncated, corrupted, half-written or tampered with."""


class SignatureError(CorruptCheckpointError):
    """The checkpoint's signature (``model.sig``) is missing, unreadable or made with another key, or the
    checkpoint's files are not exactly the signed ones (changed, added or removed since it was signed).

    A ``CorruptCheckpointError``: code that skips damaged checkpoints skips one that fails its signature.
    """


class UnsafeCheckpointError(CheckpointError):
    """Loading the checkpoint would run pickle and ``allow_pickle`` was not set."""


class IncompatibleCheckpointError(CheckpointError):
    """The checkpoint does not fit: wrong class, a newer format or state version, bad shapes."""


class MissingCallableError(CheckpointError):
    """The checkpoint was saved with callables it could not record (lambdas, closures, functions of a
    script): the message names each one and the line that passes it again to the load."""


class ComponentNotFoundError(CheckpointError, KeyError):
    """A component path does not exist; the message lists the ones that do."""

    def __str__(self) -> str:
        # KeyError would repr() the message and wrap it in quotes.
        return str(self.args[0]) if self.args else ""


def at_component(err: CheckpointError, where: str, *, path: str = "") -> CheckpointError:
    """``err``, a component's refusal of its state, with ``where`` the component is in front.

    A component names what is wrong inside its state (``counters/steps: ...``); who walks the
    tree (the restore, a runner checking its connectors) knows where the component is: its
    folder, or its ``path`` in the tree. A message that already names ``path``, and errors of
    the subclasses (a signature, a missing component), are returned as they are.
    """
    named = bool(path) and path in str(err)
    if type(err) in (CorruptCheckpointError, IncompatibleCheckpointError) and where and not named:
        return type(err)(f"{where}: {err}")
    return err

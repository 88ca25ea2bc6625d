"""The ``Checkpointable`` base class: describe yourself, and the engine does the rest."""

from __future__ import annotations

import abc
import os
from collections.abc import Collection, Iterable
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, Self

if TYPE_CHECKING:
    from cairn._delegate_protocol import DelegatedComponent
    from cairn.manifest import FileEntry

__all__ = ["Checkpointable"]

PathLike = str | os.PathLike[str]
Names = str | Collection[str] | None


def _as_list(names: Names) -> list[str]:
    if names is None:
        return []
    if isinstance(names, str):
        return [names]
    return list(names)


class StateSchema(Protocol):
    """What a component declares its state holds (:class:`cairn.state_checks.Schema` is one)."""

    def read(self, state: Any, *, where: str) -> dict[str, Any]:
        """The values of ``state`` it names, checked; raises a CheckpointError for one that does not fit."""
        ...


class Checkpointable(abc.ABC):
    """A part of an RL system that saves itself to a folder and restores from one.

    Follows RLlib's ``Checkpointable`` (``rllib/utils/checkpoints.py``). A subclass
    implements three methods:

    * :meth:`get_state` returns a dict of the object's state, with each of its
      checkpointable components' states under the component's name;
    * :meth:`set_state` applies such a dict, leaving alone whatever has no key;
    * :meth:`get_ctor_args_and_kwargs` returns how to construct the object again.

    and lists its sub-parts in :meth:`get_checkpointable_components`. Everything
    else (saving, verified restore, rebuilding from a checkpoint, partial
    restore, state migrations) is provided.

    On restore the engine reads and verifies every needed folder first, lets
    every object refuse its state (:meth:`check_state`, top-down, before any
    live memory changes), then calls ``set_state`` bottom-up: each component
    with its own keys, then the parent with its own (non-component) keys. So ``set_state`` must accept a
    state without the component keys, and, for in-memory use, one with them.

    Class attributes:
        STATE_VERSION: The version of this class's own state layout, recorded in
            each folder. Raise it when the layout changes and implement
            :meth:`upgrade_state`.
    """

    STATE_VERSION: ClassVar[int] = 1

    # ------------------------------------------------------------------ abstract

    @abc.abstractmethod
    def get_state(self, components: Names = None, *, not_components: Names = None, **kwargs: Any) -> dict[str, Any]:
        """Return the state of this object as a dict.

        Args:
            components: Names (or ``/``-joined paths) of the components to include;
                None means all.
            not_components: Names (or paths) of components to leave out, even if
                ``components`` names them.
            **kwargs: Extra options a subclass understands (none by default).

        Returns:
            The state; each included component's state sits under its name.
        """

    @abc.abstractmethod
    def set_state(self, state: dict[str, Any]) -> None:
        """Apply ``state``; components and keys missing from it are left as they are."""

    @abc.abstractmethod
    def get_ctor_args_and_kwargs(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """Return ``(args, kwargs)`` that construct an equivalent fresh object."""

    # ------------------------------------------------------------------ defaults

    def get_checkpointable_components(self) -> list[tuple[str, Checkpointable]]:
        """Return ``(name, component)`` pairs of the checkpointable sub-parts; default none.

        A name is one path segment (letters, digits, ``_``, ``-``, ``.``); it becomes
        the component's folder name.
        """
        return []

    def get_metadata(self) -> dict[str, Any]:
        """Return JSON-able facts to record in ``metadata.json`` (not part of the state)."""
        return {}

    def get_state_buffers(self) -> dict[str, Any] | None:
        """Optional: live arrays and tensors a restore may read straight into.

        Laid out like this object's own keys of :meth:`get_state` (without the
        components). A restore from local disk reads each saved tensor directly
        into the buffer at the same place when dtype and shape match (contiguous,
        on the CPU, not requiring grad), then passes that same object to
        :meth:`set_state`: no second copy of the state in memory. Only verified
        bytes are written, after every file of the restore passed its checksum:
        a file read into live buffers is verified by a pass of its own first,
        while files read into fresh arrays are checked in the pass that reads
        them. The default, None, reads into fresh arrays (one pass; the state is
        then held twice until ``set_state`` has copied it).

        A folder is read in place only when every array its file holds has a place
        here: a buffer of the same dtype and shape at the same key, or ``None``
        at that key (the object has the key, but wants a fresh array for it, like
        a generator state that ``get_state`` copies). When an array has no place
        (a key this object does not have, or a buffer of another dtype or shape),
        the checkpoint does not fit this object as it is: the whole folder is read
        into fresh arrays, so that :meth:`check_state` and :meth:`set_state` can
        refuse it before any of this object's memory changes.
        """
        return None

    @property
    def state_schema(self) -> StateSchema | None:
        """Optional: what this object's own state holds, declared (a :class:`cairn.state_checks.Schema`).

        The default :meth:`check_state` reads the state with it: a value that does not fit is
        refused before anything changes. A subclass declares it as a class attribute
        (``state_schema = Schema({...})``), or as a property when it depends on the live object
        (an array's shape). None, the default: nothing declared.
        """
        return None

    def check_state(self, state: dict[str, Any], components: Collection[str]) -> None:
        """Optional: refuse a state before anything of a restore is applied or read into place.

        A restore calls this for every object it restores, top-down, once every
        file has passed its checksum and every state is decoded (and upgraded to
        :attr:`STATE_VERSION`), but before any tensor is read into a live buffer
        (:meth:`get_state_buffers`) and before any :meth:`set_state`. When any
        object raises, nothing anywhere is changed. Check here what
        :meth:`set_state` would refuse, so that a checkpoint that does not fit
        never leaves the tree half restored. The default reads the state with
        :attr:`state_schema` (when one is declared); an override that adds checks
        of its own calls it first.

        Args:
            state: This object's own state, as :meth:`set_state` will get it
                (without its components). Arrays have their final dtype and shape,
                but arrays that land in live buffers do not hold their values yet:
                check the layout, not the values.
            components: The names of this object's components whose folders the
                restore applies (those in both the checkpoint and this object).

        Raises:
            IncompatibleCheckpointError: The state does not fit this object.
            CorruptCheckpointError: The state does not hold together.
        """
        # The default checks what the object declares (state_schema); set_state still checks what it applies.
        if self.state_schema is not None:
            self.state_schema.read(state, where="")

    def get_delegated_components(self) -> dict[str, DelegatedComponent]:
        """Optional: components whose folders someone else writes and reads; default none.

        Maps a component name (one listed by :meth:`get_checkpointable_components`)
        to a :class:`cairn.delegation.DelegatedComponent`: a remote process, a
        thread, a Ray actor that holds the component's real state. Every save,
        restore and ``from_checkpoint`` of a tree containing this object then
        lets the delegate write that folder into the checkpoint's staging place
        while the engine writes the rest, and read and verify it while the engine
        reads the rest; nothing is applied anywhere until every read passed. The
        engine never calls ``get_state`` for a delegated component (it asks this
        object for its state with ``not_components`` naming it). See
        :mod:`cairn.delegation`.
        """
        return {}

    @classmethod
    def upgrade_state(cls, state: dict[str, Any], from_version: int) -> dict[str, Any]:
        """Turn this class's own state from ``from_version`` into ``from_version + 1``.

        Called once per version step, before :meth:`set_state`, when a checkpoint
        recorded an older ``STATE_VERSION``. The default has no upgrade path.

        Raises:
            NotImplementedError: When there is no path from ``from_version``.
        """
        raise NotImplementedError(f"{cls.__qualname__} has no upgrade from state version {from_version}")

    # ------------------------------------------------------------------ template methods

    def save_to_path(
        self,
        path: PathLike | None = None,
        *,
        state: dict[str, Any] | None = None,
        filesystem: Any = None,
        allow_pickle: bool = False,
        digest: str = "blake3",
    ) -> str:
        """Save this object and its components as a checkpoint folder, atomically.

        Args:
            path: Where to write: a local path, a ``file://``, ``memory://`` or
                ``s3://`` URI, or a path on ``filesystem``. None writes to a new
                folder under the system's temp dir. An existing checkpoint there
                is replaced only once the new one is complete.
            state: Save this state instead of calling :meth:`get_state`;
                components missing from it are not written.
            filesystem: An fsspec filesystem ``path`` lives on.
            allow_pickle: Let values the safe format cannot hold be pickled (the
                checkpoint then records that, and loading it needs ``allow_pickle``).
            digest: The digest every file and manifest records: ``"blake3"`` (the
                default) or ``"sha256"`` (for users who must use it); the manifests
                record which.

        Returns:
            The path written, as a string.

        Raises:
            CheckpointError: For a value that cannot be saved (naming its path in the
                state), an unknown ``digest``, or a storage failure; a previous
                checkpoint at ``path`` is intact.
        """
        # The engine is imported on first use: it sits below this class (it walks Checkpointables),
        # and importing it here keeps `import cairn` light (no numpy).
        from cairn._save import save

        return save(self, path, state=state, filesystem=filesystem, allow_pickle=allow_pickle, digest=digest)

    def restore_from_path(
        self,
        path: PathLike,
        *,
        component: str | None = None,
        filesystem: Any = None,
        allow_pickle: bool = False,
        public_key: str | os.PathLike[str] | bytes | None = None,
    ) -> None:
        """Restore this object (or one subcomponent) from a checkpoint folder.

        Every file read is verified against the manifest before anything is applied.

        Args:
            path: The checkpoint folder. With ``component``, the folder of that
                subcomponent (e.g. ``ckpt/learner_group/learner/rl_module/p1``).
            component: A ``/``-joined path to the subcomponent of ``self`` to
                restore; the rest of ``self`` is untouched.
            filesystem: An fsspec filesystem ``path`` lives on.
            allow_pickle: Allow loading a checkpoint written with pickle.
            public_key: Restore only a checkpoint signed with this key (``cairn sign``; an
                EC public key in PEM, as a path or bytes): an unsigned or wrongly signed one
                raises :class:`~cairn.errors.SignatureError` before any state is read. A
                signature covers a whole checkpoint: ``path`` must be its root folder.

        Raises:
            CheckpointNotFoundError: No committed checkpoint at ``path``.
            CorruptCheckpointError: A file is damaged (named in the message).
            SignatureError: With ``public_key``: the checkpoint is not signed by it.
            UnsafeCheckpointError: The checkpoint needs pickle and it is not allowed.
            IncompatibleCheckpointError: Wrong class, or a format or state version too new.
            ComponentNotFoundError: ``component`` does not exist.
        """
        self._restore_checkpoint(
            path,
            component=component,
            filesystem=filesystem,
            allow_pickle=allow_pickle,
            built_from=None,
            signed_root=_signed_root(path, public_key, filesystem, component=component),
        )

    def _restore_checkpoint(
        self,
        path: PathLike,
        *,
        component: str | None,
        filesystem: Any,
        allow_pickle: bool,
        built_from: bytes | None,
        signed_root: FileEntry | None = None,
    ) -> None:
        """The restore behind :meth:`restore_from_path` and :meth:`from_checkpoint`.

        ``built_from`` is None for a restore into an existing object; from
        ``from_checkpoint`` it is the root manifest the new object was built from
        (see ``cairn._restore.restore``). Parts restored elsewhere (remote actors)
        are delegated (:meth:`get_delegated_components`), not routed here. Both entry
        points call :meth:`after_restore`, and :meth:`on_from_checkpoint_failed` when
        a built object's restore fails. ``signed_root``: the root manifest's entry a
        checked signature vouches for; the restore reads that one.
        """
        from cairn._restore import restore  # on first use, as in save_to_path

        try:
            restore(
                self,
                path,
                component=component,
                filesystem=filesystem,
                allow_pickle=allow_pickle,
                built_from=built_from,
                signed_root=signed_root,
            )
            self.after_restore(component=component)
        except BaseException:
            if built_from is not None:  # from_checkpoint drops this object: let it release what it holds
                self.on_from_checkpoint_failed()
            raise

    def after_restore(self, *, component: str | None) -> None:
        """Optional: act after every restore of this object, whole or partial; default nothing.

        Called by :meth:`restore_from_path` and :meth:`from_checkpoint` once the
        restored state is applied (an algorithm sends the restored weights to its
        workers). ``component`` is the restored subcomponent's path, None for all.
        """
        return  # most objects hold nothing outside their state

    def on_from_checkpoint_failed(self) -> None:
        """Optional: :meth:`from_checkpoint` built this object and restoring it failed; default nothing.

        The object is dropped (or, after a race with an overwrite, a new one is built):
        stop the processes, threads or actors it started, or they outlive it.
        Called once, before the error goes up.
        """
        return  # most objects hold nothing that outlives them

    @classmethod
    def from_checkpoint(
        cls,
        path: PathLike,
        *,
        filesystem: Any = None,
        allow_pickle: bool = False,
        public_key: str | os.PathLike[str] | bytes | None = None,
        trusted: Iterable[Any] | None = None,
        **ctor_overrides: Any,
    ) -> Self:
        """Build a new object of the recorded class with the recorded arguments, then restore it.

        Args:
            path: The checkpoint folder (any component's folder works on its own).
            filesystem: An fsspec filesystem ``path`` lives on.
            allow_pickle: Allow loading a checkpoint written with pickle.
            public_key: Build only from a checkpoint signed with this key (see
                :meth:`restore_from_path`): checked before any class is constructed.
            trusted: Classes and functions this load may build or call besides cairn's own
                and what the program registered (:func:`cairn.register`), as Keras's
                ``custom_objects``: ``PPO.from_checkpoint(path, trusted=[MyModule, map_fn])``.
                A checkpoint naming anything else is refused (SPEC 8).
            **ctor_overrides: Constructor parameters replacing the recorded values,
                e.g. ``PPO.from_checkpoint(path, config=new_config)``.

        Raises:
            UnsafeCheckpointError: The checkpoint names a class or function that is not on
                the allow-list (the message gives the line that allows it).
            IncompatibleCheckpointError: When the recorded class is not ``cls`` or a
                subclass of it; there is never a silent fallback to another class.
            SignatureError: With ``public_key``: the checkpoint is not signed by it.
        """
        from cairn._restore import build_from_checkpoint  # on first use, as in save_to_path
        from cairn.registry import Trusted

        obj = build_from_checkpoint(
            cls,
            path,
            filesystem=filesystem,
            allow_pickle=allow_pickle,
            ctor_overrides=ctor_overrides,
            signed_root=_signed_root(path, public_key, filesystem),
            trusted=Trusted.of(trusted),
        )
        return obj  # type: ignore[return-value]

    # ------------------------------------------------------------------ helpers for subclasses

    def _check_component(self, name: str, components: Names, not_components: Names) -> bool:
        """Whether component ``name`` is selected by ``components`` / ``not_components``."""
        if name in _as_list(not_components):
            return False
        comps = _as_list(components)
        if components is None:
            return True
        return any(c == name or c.startswith(name + "/") for c in comps)

    def _get_subcomponents(self, name: str, components: Names) -> list[str] | None:
        """The paths under ``name`` in ``components``, with ``name/`` stripped.

        None means "all of it" (``components`` is None, or names ``name`` itself).
        """
        if components is None:
            return None
        comps = _as_list(components)
        if name in comps:
            return None
        subs = [c[len(name) + 1 :] for c in comps if c.startswith(name + "/")]
        return subs or None

    def _get_not_subcomponents(self, name: str, not_components: Names) -> list[str] | None:
        """The paths under ``name`` in ``not_components``, with ``name/`` stripped."""
        subs = [c[len(name) + 1 :] for c in _as_list(not_components) if c.startswith(name + "/")]
        return subs or None

    def _get_components_state(self, components: Names = None, *, not_components: Names = None) -> dict[str, Any]:
        """The states of the selected components, each under its name.

        A convenience for :meth:`get_state` implementations::

            def get_state(self, components=None, *, not_components=None, **kw):
                return {"step": self.step,
                        **self._get_components_state(components, not_components=not_components)}
        """
        out: dict[str, Any] = {}
        for name, comp in self.get_checkpointable_components():
            if self._check_component(name, components, not_components):
                out[name] = comp.get_state(
                    self._get_subcomponents(name, components),
                    not_components=self._get_not_subcomponents(name, not_components),
                )
        return out

    def _set_components_state(self, state: dict[str, Any]) -> None:
        """Forward each component's entry of ``state`` (when present) to its ``set_state``."""
        for name, comp in self.get_checkpointable_components():
            if name in state:
                comp.set_state(state[name])


def _signed_root(
    path: PathLike, public_key: str | os.PathLike[str] | bytes | None, filesystem: Any, *, component: str | None = None
) -> FileEntry | None:
    """The signed root manifest's entry when a ``public_key`` is given (checked first), else None."""
    if public_key is None:
        return None
    if component:
        from cairn.errors import CheckpointError

        raise CheckpointError(
            f"Cannot check a signature for component {component!r} at {path}: a signature covers a whole "
            "checkpoint. Verify its root with cairn.verify_signature(root, public_key), then restore the "
            "component without public_key."
        )
    from cairn.signing import signed_root

    return signed_root(path, public_key, filesystem=filesystem)

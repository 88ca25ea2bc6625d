"""Reading and verifying one checkpoint folder, and reading a checkpoint consistently.

:class:`FolderReader` verifies every byte it returns against the folder's
manifest (which the parent's manifest seals, up to the root);
:func:`read_consistently` reruns a read that met a concurrent overwrite.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

from cairn._tensorio import ChangedInPlaceError, MemoryTensorFile, StreamedTensorFile, _byte_view, check_ref
from cairn.errors import (
    CheckpointError,
    CheckpointNotFoundError,
    ComponentNotFoundError,
    CorruptCheckpointError,
    UnreadableCheckpointError,
    UnsafeCheckpointError,
)
from cairn.manifest import (
    CTOR,
    EMPTY_STATE,
    MANIFEST,
    MAX_COMPONENT_DEPTH,
    MAX_JSON_BYTES,
    METADATA,
    PACK,
    STATE,
    TENSORS,
    FileEntry,
    Hasher,
    Manifest,
    check_format_version,
    load_json,
)
from cairn.registry import Trusted
from cairn.storage.base import FileTooLargeError, Storage
from cairn.storage.resolve import resolve_storage

# numpy, msgpack and the codecs are imported inside the functions that encode or
# decode, so that reading manifests and metadata (cairn inspect, ls) stays fast.


def unreadable_error(where: str, err: PermissionError) -> UnreadableCheckpointError:
    """The error for a file or folder of a checkpoint this process may not read (the one phrasing of it)."""
    return UnreadableCheckpointError(
        f"{where} cannot be read: {err.strerror or 'permission denied'}. Give the user running this process "
        f"read access to the checkpoint's files and folders (for example `chmod -R u+rX` on the checkpoint, or "
        "run as the user that wrote it), then load it again."
    )


class PackedTensorFile(MemoryTensorFile):
    """A tensor file packed in its folder's ``packed.bin``: in memory and verified, read into live buffers later.

    As a file of its own on local disk is (``get_state_buffers``): an array whose live
    buffer fits is planned into that buffer, which :meth:`read_all` fills from the
    verified bytes once the restore allows live writes (``cairn._restore.read_sources``);
    any other array is a view of the bytes, as :class:`MemoryTensorFile` gives.
    """

    def __init__(self, data: bytearray, where: str) -> None:
        """Parse the header of the verified ``data`` (the member sliced from the pack)."""
        super().__init__(data, where)
        self.jobs: list[tuple[memoryview, int, int]] = []

    def get(self, name: str, kind: int, dtype: Any, shape: list[int], dest: Any = None) -> Any:
        """``dest`` itself when it can receive the array (filled by :meth:`read_all`), else a view of the bytes."""
        if dest is not None:
            rec, out_dtype = check_ref(self.records, self.where, name, kind, dtype, shape)
            view = _byte_view(dest, kind, out_dtype, shape)
            if view is not None and len(view) == rec.end - rec.begin:
                self.jobs.append((view, rec.begin, rec.end))
                self.live = True
                return dest
        return super().get(name, kind, dtype, shape)

    def forget_plan(self) -> None:
        """Drop every planned destination (the state is decoded again, into fresh arrays)."""
        self.jobs, self.live = [], False

    def read_all(self) -> None:
        """Copy the verified bytes into every planned live buffer."""
        data = memoryview(self.data)
        jobs, self.jobs = self.jobs, []
        for view, begin, end in jobs:
            view[:] = data[begin:end]


@dataclass
class FolderReader:
    """Reads one checkpoint folder, verifying every byte against its manifest."""

    storage: Storage
    folder: str
    expected: FileEntry | None = None  # the parent's record of this folder's manifest
    depth: int = 0  # how many components down from the folder the reader was opened at
    # The path the caller named (open_checkpoint); ``folder`` is where the storage said to read it
    # (Storage.locate: during an object store's switch, the staging folder, gone once the switch is
    # done). A fresh reader (reopened) asks the storage again.
    named: str | None = None
    _manifest: Manifest | None = None
    _metadata: dict[str, Any] | None = None
    _manifest_bytes: bytes | None = None  # exactly what was read, to notice a concurrent overwrite
    _pack: bytearray | None = None  # the folder's PACK, read and verified whole once

    def where(self, name: str = "") -> str:
        """The user-facing location of a file of this folder."""
        return self.storage.uri(self.storage.join(self.folder, name) if name else self.folder)

    @property
    def manifest(self) -> Manifest:
        """The folder's manifest, read and checked once."""
        if self._manifest is None:
            self._manifest = self._read_manifest()
        return self._manifest

    def _read_manifest(self) -> Manifest:
        path = self.storage.join(self.folder, MANIFEST)
        if self.storage.is_symlink(self.folder):
            raise CorruptCheckpointError(
                f"{self.where()} is a symbolic link; cairn never follows links inside a checkpoint."
            )
        try:
            data = self._read_root_or_listed(path)
        except FileNotFoundError as err:
            if self.expected is not None:
                raise CorruptCheckpointError(
                    f"{self.where(MANIFEST)} is missing, though the parent folder's manifest lists it; "
                    "the checkpoint is damaged."
                ) from err
            if not self.storage.exists(self.folder):
                raise CheckpointNotFoundError(f"No checkpoint at {self.where()}: the path does not exist.") from err
            raise CheckpointNotFoundError(
                f"No committed checkpoint at {self.where()}: it has no {MANIFEST}. The save that "
                "wrote it was interrupted, or it is not a cairn checkpoint."
            ) from err
        except PermissionError as err:
            raise unreadable_error(self.where(MANIFEST), err) from err
        except (IsADirectoryError, NotADirectoryError) as err:
            # A hostile or damaged tree: a file where a folder should be, or the reverse.
            raise CorruptCheckpointError(
                f"{self.where(MANIFEST)} cannot be read: {err.strerror or err}; the checkpoint's folder "
                "structure is damaged."
            ) from err
        if self.expected is not None:
            self._check(data, self.expected, MANIFEST)
        self._manifest_bytes = bytes(data)
        manifest = Manifest.from_bytes(data, where=self.where(MANIFEST))
        if self.expected is not None and manifest.algorithm != self.expected.digest.algorithm:
            # A format 1 folder under a format 2 parent would let CRC-32s (which anyone can forge)
            # vouch for files that the parent's SHA-256 seals only through this manifest.
            raise CorruptCheckpointError(
                f"{self.where(MANIFEST)} is in checkpoint format {manifest.format_version} under a parent of "
                "another format; cairn never mixes formats in one checkpoint, so it is tampered or damaged."
            )
        return manifest

    def _read_root_or_listed(self, path: str) -> bytearray:
        """Read the folder's manifest, once more if the folder was swapped for a new version meanwhile.

        A local read opens the folder, then the file inside it (``open_regular``): a save
        that swaps a new version into place (an atomic exchange) and removes the old one in
        between leaves the opened folder empty, while the path holds a complete checkpoint
        again. That is a race, not a missing checkpoint: the manifest is read again.
        """
        for attempt in range(3):
            try:
                return self.storage.read_file(path, max_bytes=MAX_JSON_BYTES)
            except FileNotFoundError:
                if attempt == 2 or not self.storage.exists(path):
                    raise
        raise AssertionError("unreachable")  # pragma: no cover

    def manifest_bytes(self) -> bytes:
        """The bytes of the folder's manifest as read (reading it first if needed)."""
        self.manifest  # noqa: B018 - reads and checks it once
        assert self._manifest_bytes is not None  # set by _read_manifest
        return self._manifest_bytes

    def changed(self) -> bool:
        """Whether the folder's manifest on storage is no longer the one this reader read.

        A manifest that is gone or unreadable now counts as changed: the checkpoint is
        being replaced or deleted.
        """
        if self._manifest_bytes is None:
            return False
        try:
            now = self.storage.read_file(self.storage.join(self.folder, MANIFEST), max_bytes=MAX_JSON_BYTES)
        except (OSError, CheckpointError):
            return True
        return bytes(now) != self._manifest_bytes

    def reopened(self) -> FolderReader:
        """A new reader of the same checkpoint, reading everything afresh.

        A reader opened at a path the storage resolved elsewhere (``named``) resolves it
        again: the staging folder a switch was read from is gone once the switch is done,
        and the path then holds the checkpoint itself (SPEC 8: the old or the new one).

        Raises:
            CheckpointNotFoundError: The path now lies inside a save that has not committed.
        """
        folder = self.folder if self.named is None else self.storage.locate(self.named)
        return FolderReader(self.storage, folder, expected=self.expected, depth=self.depth, named=self.named)

    def _check(self, data: bytes | bytearray | memoryview, entry: FileEntry, name: str) -> None:
        if len(data) != entry.size:
            raise CorruptCheckpointError(
                f"{self.where(name)} is {len(data)} bytes but the manifest records {entry.size}; the file "
                "is truncated or was changed after the save. Restore it from a good copy."
            )
        hasher = Hasher(entry.digest.algorithm)
        hasher.update(data)
        digest = hasher.digest()
        if digest != entry.digest:
            raise CorruptCheckpointError(
                f"{self.where(name)} fails its checksum ({digest}, manifest says {entry.digest}): the file is "
                "corrupted. Restore it from a good copy."
            )

    def read(self, name: str, *, max_bytes: int | None = None) -> bytearray:
        """Read a file listed in the manifest (or a member of the folder's pack) and verify it."""
        member = self.manifest.packed.get(name)
        if member is not None:
            return self._member(name, member, max_bytes)
        entry = self.manifest.files.get(name)
        if entry is None:
            raise CorruptCheckpointError(
                f"{self.where(name)} is not listed in the folder's manifest; the checkpoint is incomplete or tampered."
            )
        path = self.storage.join(self.folder, name)
        if max_bytes is not None and entry.size > max_bytes:
            raise CorruptCheckpointError(
                f"{self.where(name)} is recorded as {entry.size} bytes, over the limit of {max_bytes}."
            )
        try:
            data = self.storage.read_file(path, max_bytes=entry.size if max_bytes is None else max_bytes)
        except FileNotFoundError as err:
            raise CorruptCheckpointError(
                f"{self.where(name)} is missing, though the manifest lists it; the checkpoint is damaged."
            ) from err
        except PermissionError as err:
            raise unreadable_error(self.where(name), err) from err
        except (IsADirectoryError, NotADirectoryError) as err:
            raise CorruptCheckpointError(
                f"{self.where(name)} cannot be read: {err.strerror or err}; "
                "the checkpoint's folder structure is damaged."
            ) from err
        except FileTooLargeError as err:
            raise CorruptCheckpointError(
                f"{self.where(name)} is larger than the manifest records ({entry.size} bytes); "
                "the file was changed after the save."
            ) from err
        self._check(data, entry, name)
        return data

    def _member(self, name: str, member: tuple[int, int], max_bytes: int | None) -> bytearray:
        """The bytes of the packed file ``name``: sliced from the pack, which is read and verified whole first.

        The manifest's parser checked that the members tile the pack's recorded size
        (:func:`cairn.manifest._parse_packed`), and ``read`` checks the pack is that size
        and digest: the slice is in bounds and every byte of it verified.
        """
        offset, size = member
        if max_bytes is not None and size > max_bytes:
            raise CorruptCheckpointError(
                f"{self.where(name)} is recorded as {size} bytes, over the limit of {max_bytes}."
            )
        if self._pack is None:
            self._pack = self.read(PACK)
        return self._pack[offset : offset + size]

    @property
    def metadata(self) -> dict[str, Any]:
        """The verified ``metadata.json``."""
        if self._metadata is None:
            meta = load_json(self.read(METADATA, max_bytes=MAX_JSON_BYTES), where=self.where(METADATA))
            if not isinstance(meta, dict):
                raise CorruptCheckpointError(f"{self.where(METADATA)} is not a JSON object.")
            check_format_version(meta.get("format_version"), where=self.where(METADATA))
            for key, typ in (("class", str), ("state_version", int), ("uses_pickle", bool)):
                if not isinstance(meta.get(key), typ):
                    raise CorruptCheckpointError(f"{self.where(METADATA)} lacks a valid {key!r}.")
            self._metadata = meta
        return self._metadata

    def child(self, name: str) -> FolderReader:
        """The reader of component ``name``'s folder."""
        if not self.manifest.has_component(name):
            raise ComponentNotFoundError(
                f"The checkpoint at {self.where()} has no component {name!r}; it has: "
                f"{', '.join(self.manifest.components) or '(none)'}."
            )
        if self.depth >= MAX_COMPONENT_DEPTH:
            raise CorruptCheckpointError(
                f"{self.where(name)} nests components more than {MAX_COMPONENT_DEPTH} levels deep; cairn "
                "never writes such a checkpoint, so it is hostile or damaged."
            )
        return FolderReader(
            self.storage,
            self.storage.join(self.folder, name),
            expected=self.manifest.files[f"{name}/{MANIFEST}"],
            depth=self.depth + 1,
        )

    def check_pickle(self, allow_pickle: bool) -> None:
        """Refuse a folder written with pickle unless allowed."""
        if self.metadata["uses_pickle"] and not allow_pickle:
            raise UnsafeCheckpointError(
                f"The checkpoint folder {self.where()} was saved with allow_pickle=True, and "
                "unpickling can run arbitrary code. Load it with allow_pickle=True only if you "
                "trust where it came from."
            )

    def ctor(self, allow_pickle: bool, trusted: Trusted | None = None) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """The recorded constructor arguments; the classes they name resolve with ``trusted`` (SPEC 8)."""
        from cairn.codec.ctor import decode_ctor

        self.check_pickle(allow_pickle)
        obj = load_json(self.read(CTOR, max_bytes=MAX_JSON_BYTES), where=self.where(CTOR))
        return decode_ctor(obj, allow_pickle=allow_pickle, where=self.where(CTOR), trusted=trusted)

    def tensor_source(self) -> MemoryTensorFile | StreamedTensorFile | PackedTensorFile | None:
        """The folder's tensor file, or None when it has none.

        Files on other storage are read whole and verified here. A local file's size
        and header are checked here; its checksum by ``verify()`` or ``read_all()``
        (see :func:`read_sources`).
        """
        if TENSORS in self.manifest.packed:
            return PackedTensorFile(self.read(TENSORS), self.where(TENSORS))
        entry = self.manifest.files.get(TENSORS)
        if entry is None:
            return None
        if not self.storage.file_descriptors:
            return MemoryTensorFile(self.read(TENSORS), self.where(TENSORS))
        path = self.storage.join(self.folder, TENSORS)
        try:
            fd = self.storage.open_regular(path)
        except FileNotFoundError as err:
            raise CorruptCheckpointError(
                f"{self.where(TENSORS)} is missing, though the manifest lists it; the checkpoint is damaged."
            ) from err
        except PermissionError as err:
            raise unreadable_error(self.where(TENSORS), err) from err
        except (IsADirectoryError, NotADirectoryError) as err:
            raise CorruptCheckpointError(
                f"{self.where(TENSORS)} cannot be read: {err.strerror or err}; the checkpoint's folder structure "
                "is damaged."
            ) from err
        return StreamedTensorFile(fd, entry, self.where(TENSORS))

    def decode(
        self,
        skeleton: bytearray,
        tensors: MemoryTensorFile | StreamedTensorFile | None,
        allow_pickle: bool,
        buffers: dict[str, Any] | None = None,
        *,
        unplaced: list[str] | None = None,
    ) -> dict[str, Any]:
        """Decode the verified ``state.msgpack``; arrays come from ``tensors``.

        With a streamed tensor file the arrays are only allocated (or taken from
        ``buffers``) here; they are filled by ``tensors.read_all()``.
        ``unplaced``: receives the names of the arrays that have no place in
        ``buffers`` (no key there, or a buffer of another dtype or shape; see
        ``Checkpointable.get_state_buffers``).
        """
        from cairn._tensorio import same_layout
        from cairn.codec.state import decode_state

        where = self.where(STATE)
        dests = _leaf_map(buffers) if buffers else {}
        cache: dict[tuple[str, int], Any] = {}

        def load_array(name: str, kind: int, dtype: Any, shape: list[int]) -> Any:
            if tensors is None:
                raise CorruptCheckpointError(f"{where} refers to the array {name!r} but the folder has no {TENSORS}.")
            # The same array saved twice (one object under two keys) comes back as one object.
            key = (name, kind)
            if key not in cache:
                placed = name in dests
                dest = dests.pop(name, None)
                cache[key] = value = tensors.get(name, kind, dtype, shape, dest)
                fits = placed and (dest is None or same_layout(value, dest))
                if unplaced is not None and buffers and not fits:
                    unplaced.append(name)
            return cache[key]

        state = decode_state(skeleton, load_array=load_array, allow_pickle=allow_pickle, where=where)
        if not isinstance(state, dict):
            raise CorruptCheckpointError(f"{where} does not hold a dict.")
        return state

    def skeleton(self) -> bytearray:
        """The folder's verified ``state.msgpack``, or :data:`EMPTY_STATE` where format 3 left it out.

        A format 3 save writes no ``state.msgpack`` for a folder whose own state is empty; a
        manifest that lists ``tensors.safetensors`` without it, or an older format's without
        it, is refused as incomplete (``read``'s error).
        """
        manifest = self.manifest
        if not manifest.lists(STATE) and not manifest.lists(TENSORS) and manifest.format_version >= 3:
            return bytearray(EMPTY_STATE)
        return self.read(STATE)

    def state(self, allow_pickle: bool) -> dict[str, Any]:
        """The folder's own state (without its components), verified and decoded."""
        self.check_pickle(allow_pickle)
        skeleton = self.skeleton()
        tensors = self.tensor_source()
        try:
            state = self.decode(skeleton, tensors, allow_pickle)
            if tensors is not None:
                tensors.read_all()
        finally:
            if tensors is not None:
                tensors.close()
        return state


# --------------------------------------------------------------------------- concurrent overwrites

READ_ATTEMPTS = 4
"""How many times a read that meets a concurrent overwrite of its checkpoint is tried."""
_RETRY_DELAYS = (0.05, 0.25, 1.0)  # seconds before the 2nd, 3rd and 4th attempt

T = TypeVar("T")


def _exists(reader: FolderReader) -> bool:
    try:
        return reader.storage.exists(reader.folder)
    except (OSError, CheckpointError):
        return False


class ReadRace(CheckpointError):
    """A read of a fresh object failed; the caller that built the object decides to retry."""

    def __init__(self, cause: CheckpointError, *, changed: bool) -> None:
        """Wrap ``cause``; ``changed``: whether the checkpoint was overwritten meanwhile (a retry may pass)."""
        super().__init__(str(cause))
        self.cause = cause
        self.changed = changed


def read_consistently(reader: FolderReader, read: Callable[[FolderReader], T], *, confirm: bool = True) -> T:
    """Run ``read(reader)`` so that it sees one version of the checkpoint, never a mix.

    Every file is verified against the manifests, which the root manifest seals; a
    mismatch is corruption only if the root manifest did not change meanwhile. When it
    did (another process saved over the same path), the whole read starts again, up to
    :data:`READ_ATTEMPTS` times. A mismatch under an unchanged root manifest is read once
    more before it is reported (unless ``confirm`` is False): the folder may have been
    replaced twice with byte-identical manifests.

    Raises:
        CorruptCheckpointError: The same damage was found twice under one root manifest.
        CheckpointNotFoundError: The checkpoint was deleted while it was being read.
        CheckpointError: It kept changing while it was being read.
    """
    last: CheckpointError | None = None
    unconfirmed = seen = False
    for attempt in range(READ_ATTEMPTS):
        try:
            if attempt:
                time.sleep(_RETRY_DELAYS[min(attempt, len(_RETRY_DELAYS)) - 1])
                reader = reader.reopened()
            return read(reader)
        except CheckpointNotFoundError as err:
            seen = seen or reader._manifest_bytes is not None
            # Object stores delete the old root manifest first when a save replaces a
            # checkpoint: a folder without one may be mid-overwrite. On disks with atomic
            # renames it never is, and a missing manifest is final. A reader sent to a
            # staging folder (a switch) that is gone asks where the path is read again.
            moved = reader.named is not None and reader.folder != reader.named
            if not seen and not moved and (reader.storage.atomic_rename or not _exists(reader)):
                raise
            last = err
        except ChangedInPlaceError:
            raise  # live values may hold the changed bytes: a retry would hide that (see the class)
        except (CorruptCheckpointError, ReadRace) as err:
            seen = seen or reader._manifest_bytes is not None
            changed = err.changed if isinstance(err, ReadRace) else reader.changed()
            cause = err.cause if isinstance(err, ReadRace) else err
            last = cause
            if not changed:
                if unconfirmed or not confirm:
                    raise cause from None
                unconfirmed = True
    if isinstance(last, CheckpointNotFoundError):
        if not seen:
            raise last
        raise CheckpointNotFoundError(
            f"The checkpoint at {reader.where()} was deleted, or is being replaced, while it was being read: {last}"
        ) from last
    raise CheckpointError(
        f"The checkpoint at {reader.where()} changed while it was being read ({READ_ATTEMPTS} attempts): "
        "another process is saving over it. Read it again once that save is done, or save to new paths "
        f"(a CheckpointManager does). Last problem: {last}"
    ) from last


def _leaf_map(tree: Any) -> dict[str, Any]:
    """Leaves of a state tree by the names the encoder gives tensors; ambiguous names are dropped."""
    out: dict[str, Any] = {}
    dup: set[str] = set()

    def walk(v: Any, path: tuple[Any, ...]) -> None:
        if type(v) is dict:
            for k, x in v.items():
                walk(x, (*path, k))
        elif type(v) in (list, tuple):
            for i, x in enumerate(v):
                walk(x, (*path, i))
        else:
            name = "/".join(str(p) for p in path) or "value"
            if name in out:
                dup.add(name)
            out[name] = v

    walk(tree, ())
    for d in dup:
        out.pop(d, None)
    return out


def resolve_user_link(storage: Storage, folder: str) -> str:
    """``folder`` with a link the user typed (``best -> run/step_000000040``) resolved, once.

    Only links *inside* a checkpoint are damage (:class:`FolderReader` refuses them); the
    path given to cairn may itself be a link, as may its parent folders. It is resolved
    here, before anything is read, so that every later read goes to one real folder
    (``is_symlink`` is true only on local disks, where ``realpath`` applies).
    """
    return os.path.realpath(folder) if storage.is_symlink(folder) else folder


def open_checkpoint(
    path: str | os.PathLike[str], filesystem: Any, *, expected: FileEntry | None = None
) -> FolderReader:
    """A reader for the checkpoint folder at ``path``; with ``expected``, its root manifest must be that one."""
    storage, folder = resolve_storage(path, filesystem)
    folder = resolve_user_link(storage, folder)
    # Object stores: not a sub-folder of a save in flight; during a switch, the staged copy (whole).
    # A retry of a read that met an overwrite resolves the path again (FolderReader.reopened).
    return FolderReader(storage, storage.locate(folder), expected=expected, named=folder)


def iter_folders(reader: FolderReader, label: str = "") -> Iterator[tuple[str, FolderReader]]:
    """Every folder of a checkpoint, depth first, with its component path."""
    yield label, reader
    for name in reader.manifest.components:
        yield from iter_folders(reader.child(name), f"{label}/{name}" if label else name)


def iter_folders_lenient(reader: FolderReader, label: str = "") -> Iterator[tuple[str, FolderReader]]:
    """Like :func:`iter_folders`, skipping folders whose manifest cannot be read."""
    try:
        comps = reader.manifest.components
    except CheckpointError:
        return
    yield label, reader
    for name in comps:
        yield from iter_folders_lenient(reader.child(name), f"{label}/{name}" if label else name)

"""The engine: walks a component tree and turns it into verified files, and back.

A save first plans the whole tree (gets the state, encodes every folder) so
that an unsupported value fails before anything is written; then it writes
each folder bottom-up (children, own files, own manifest) into the storage's
staging place and commits. A restore reads and verifies every folder it needs
first, then applies the states bottom-up, so that a corrupt file never leaves
an object half restored.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import sys
import tempfile
import time
import uuid
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from cairn._crc import crc32
from cairn._tensorio import MemoryTensorFile, StreamedTensorFile
from cairn._version import __version__
from cairn.codec.tensors import build_header
from cairn.errors import (
    CheckpointError,
    CheckpointNotFoundError,
    ComponentNotFoundError,
    CorruptCheckpointError,
    DamagedCheckpointWarning,
    IncompatibleCheckpointError,
    UnsafeCheckpointError,
)
from cairn.manifest import (
    CTOR,
    FORMAT_VERSION,
    MANIFEST,
    MAX_COMPONENT_DEPTH,
    MAX_JSON_BYTES,
    METADATA,
    STATE,
    TENSORS,
    FileEntry,
    Manifest,
    component_name_problem,
    load_json,
)
from cairn.registry import class_path, resolve_class
from cairn.storage.base import Chunk, FileTooLargeError, Storage, resolve_storage

if TYPE_CHECKING:
    from cairn.checkpointable import Checkpointable
    from cairn.codec.state import EncodedState

# numpy, msgpack and the codecs are imported inside the functions that encode or
# decode, so that reading manifests and metadata (cairn inspect, ls) stays fast.

_STANDARD_KEYS = frozenset(
    {
        "format_version",
        "cairn_version",
        "class",
        "state_version",
        "frameworks",
        "created",
        "uses_pickle",
        "components",
        "has_tensors",
    }
)


# --------------------------------------------------------------------------- helpers


def checkpointable_components(obj: Checkpointable, *, where: str) -> dict[str, Checkpointable]:
    """``obj.get_checkpointable_components()`` as a dict, with every name validated."""
    from cairn.checkpointable import Checkpointable

    out: dict[str, Checkpointable] = {}
    for name, comp in obj.get_checkpointable_components():
        problem = component_name_problem(name)
        if problem is not None:
            raise CheckpointError(
                f"{type(obj).__qualname__} at {where} has a component named {name!r}, which "
                f"cannot be a folder name: {problem}. Rename the component."
            )
        if name in out:
            raise CheckpointError(f"{type(obj).__qualname__} at {where} lists the component {name!r} twice.")
        if not isinstance(comp, Checkpointable):
            raise CheckpointError(
                f"Component {name!r} of {type(obj).__qualname__} at {where} is a "
                f"{type(comp).__qualname__}, not a cairn.Checkpointable."
            )
        out[name] = comp
    return out


def find_component(obj: Checkpointable, component: str) -> Checkpointable:
    """The subcomponent of ``obj`` at the ``/``-joined path ``component``."""
    current = obj
    walked: list[str] = []
    for part in component.strip("/").split("/"):
        comps = checkpointable_components(current, where="/".join(walked) or "<root>")
        if part not in comps:
            here = "/".join(walked)
            known = [f"{here}/{n}" if here else n for n in comps]
            raise ComponentNotFoundError(
                f"{type(obj).__qualname__} has no component {component!r}: "
                f"{'/'.join([*walked, part])!r} does not exist. "
                f"Components at that level: {', '.join(known) if known else '(none)'}."
            )
        current = comps[part]
        walked.append(part)
    return current


def component_tree(obj: Checkpointable, prefix: str = "") -> list[str]:
    """Every component path below ``obj``, depth first."""
    paths: list[str] = []
    for name, comp in checkpointable_components(obj, where=prefix or "<root>").items():
        p = f"{prefix}/{name}" if prefix else name
        paths.append(p)
        paths.extend(component_tree(comp, p))
    return paths


def _frameworks() -> dict[str, str]:
    import numpy as np

    out = {"python": platform.python_version(), "numpy": np.__version__}
    for mod in ("torch", "gymnasium"):
        m = sys.modules.get(mod)
        if m is not None:
            out[mod] = str(getattr(m, "__version__", "unknown"))
    return out


# --------------------------------------------------------------------------- save


@dataclass
class _PlannedFolder:
    files: dict[str, list[Chunk]]
    children: dict[str, _PlannedFolder] = field(default_factory=dict)
    array_bytes: int = 0


def _tensor_chunks(encoded: EncodedState) -> list[Chunk]:
    header = build_header(encoded.tensors, {"format": "cairn"})
    return [header, *(memoryview(e.data.data) for e in encoded.tensors if e.data.nbytes)]


def _json_bytes(obj: Any) -> bytes:
    return json.dumps(obj, indent=1, sort_keys=False, allow_nan=False).encode("utf-8") + b"\n"


def plan_save(
    obj: Checkpointable,
    state: Any,
    *,
    allow_pickle: bool,
    where: str = "",
    extra_metadata: dict[str, Any] | None = None,
) -> _PlannedFolder:
    """Encode ``obj``'s folder and its components' folders, writing nothing.

    ``extra_metadata`` (the root only) is merged into ``metadata.json``; the
    manager records steps and metrics there.
    """
    from cairn.codec.ctor import encode_ctor
    from cairn.codec.state import encode_state

    label = where or "<root>"
    if where and where.count("/") + 1 > MAX_COMPONENT_DEPTH:
        raise CheckpointError(
            f"{type(obj).__qualname__} at {where[:200]}... nests components more than {MAX_COMPONENT_DEPTH} "
            "levels deep, which cairn refuses (a reader could not tell it from a hostile checkpoint). "
            "Flatten the component tree."
        )
    if not isinstance(state, dict):
        raise CheckpointError(
            f"{type(obj).__qualname__}.get_state() at {label} returned a {type(state).__name__}; "
            "a state must be a dict."
        )
    comps = checkpointable_components(obj, where=label)
    own = {k: v for k, v in state.items() if k not in comps}
    try:
        encoded = encode_state(own, allow_pickle=allow_pickle)
    except CheckpointError as err:
        if where:
            raise CheckpointError(f"In component {where!r}: {err}") from err
        raise
    args, kwargs = obj.get_ctor_args_and_kwargs()
    try:
        ctor, ctor_pickle = encode_ctor(args, kwargs, allow_pickle=allow_pickle)
    except CheckpointError as err:
        raise CheckpointError(f"{type(obj).__qualname__} at {label}: {err}") from err
    children = {
        name: plan_save(comp, state[name], allow_pickle=allow_pickle, where=f"{where}/{name}" if where else name)
        for name, comp in comps.items()
        if name in state
    }
    user_meta = obj.get_metadata()
    if not isinstance(user_meta, dict):
        raise CheckpointError(f"{type(obj).__qualname__}.get_metadata() must return a dict.")
    clash = _STANDARD_KEYS & set(user_meta)
    if clash:
        raise CheckpointError(
            f"{type(obj).__qualname__}.get_metadata() returns the reserved keys {sorted(clash)}; rename them."
        )
    metadata: dict[str, Any] = {
        "format_version": FORMAT_VERSION,
        "cairn_version": __version__,
        "class": class_path(type(obj)),
        "state_version": int(type(obj).STATE_VERSION),
        "frameworks": _frameworks(),
        "created": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "uses_pickle": bool(encoded.used_pickle or ctor_pickle),
        "has_tensors": bool(encoded.tensors),
        "components": sorted(children),
        **user_meta,
        **(extra_metadata or {}),
    }
    try:
        meta_bytes = _json_bytes(metadata)
    except (TypeError, ValueError) as err:
        raise CheckpointError(f"{type(obj).__qualname__}.get_metadata() is not JSON-able: {err}") from err
    files: dict[str, list[Chunk]] = {STATE: [encoded.skeleton], CTOR: [_json_bytes(ctor)]}
    if encoded.tensors:
        files[TENSORS] = _tensor_chunks(encoded)
    files[METADATA] = [meta_bytes]
    return _PlannedFolder(files=files, children=children, array_bytes=encoded.num_array_bytes)


@dataclass
class WriteStats:
    """What a save wrote: bytes sent to storage and bytes reused from the previous checkpoint."""

    bytes_written: int = 0
    bytes_linked: int = 0
    files_written: int = 0
    files_linked: int = 0


def _previous_entry(previous: FolderReader | None, name: str) -> FileEntry | None:
    if previous is None:
        return None
    try:
        return previous.manifest.files.get(name)
    except CheckpointError:
        return None  # an unreadable previous checkpoint is simply not reused


def write_planned(
    storage: Storage,
    folder: str,
    plan: _PlannedFolder,
    *,
    previous: FolderReader | None = None,
    stats: WriteStats | None = None,
    before_manifest: Callable[[], None] | None = None,
) -> FileEntry:
    """Write a planned folder bottom-up; return its manifest's entry for the parent.

    With ``previous`` (the same component's folder in an earlier checkpoint), a
    file whose size and CRC-32 match is hard-linked or copied server-side
    instead of written again. ``before_manifest`` runs just before this folder's
    own manifest is written (the root's is the commit marker on object stores).
    """
    stats = stats if stats is not None else WriteStats()
    storage.makedirs(folder)
    manifest = Manifest()
    for name, child in plan.children.items():
        prev_child = None
        if previous is not None:
            try:
                prev_child = previous.child(name) if name in previous.manifest.components else None
            except CheckpointError:
                prev_child = None
        manifest.files[f"{name}/{MANIFEST}"] = write_planned(
            storage, storage.join(folder, name), child, previous=prev_child, stats=stats
        )
        manifest.components.append(name)
    for fname, chunks in plan.files.items():
        dst = storage.join(folder, fname)
        prev = _previous_entry(previous, fname)
        if prev is not None and fname != METADATA and previous is not None:
            size, crc = _size_crc(chunks)
            # Damage never spreads: a file is reused only if it still holds the bytes its
            # manifest records (a flipped bit linked into every later step would leave no
            # good copy once retention deletes the damaged one).
            if size == prev.size and crc == prev.crc32 and _still_matches(previous, fname, prev):
                storage.link_or_copy(previous.storage.join(previous.folder, fname), dst)
                manifest.files[fname] = FileEntry(size, crc)
                stats.bytes_linked += size
                stats.files_linked += 1
                continue
        size, crc = storage.write_file(dst, chunks)
        stats.bytes_written += size
        stats.files_written += 1
        manifest.files[fname] = FileEntry(size, crc)
    data = manifest.to_bytes()
    if before_manifest is not None:
        before_manifest()
    size, crc = storage.write_file(storage.join(folder, MANIFEST), [data])
    return FileEntry(size, crc)


_REUSE_CHECK_CHUNK = 16 << 20


def _still_matches(previous: FolderReader, name: str, entry: FileEntry) -> bool:
    """Whether the previous checkpoint's file ``name`` still matches its manifest ``entry``.

    Read in bounded chunks (never the whole file at once). On a mismatch, or any
    error reading it, the file is not reused and a warning names it.
    """
    storage = previous.storage
    path = storage.join(previous.folder, name)
    problem = ""
    try:
        if storage.is_symlink(path):
            problem = "it is a symbolic link"
        elif storage.size(path) != entry.size:
            problem = f"it is {storage.size(path)} bytes but its manifest records {entry.size}"
        else:
            crc, off = 0, 0
            while off < entry.size:
                chunk = storage.read_range(path, off, min(off + _REUSE_CHECK_CHUNK, entry.size))
                if not chunk:
                    break
                crc = crc32(chunk, crc)
                off += len(chunk)
            if off != entry.size or crc != entry.crc32:
                problem = f"it fails its checksum (crc32 {crc:08x}, manifest says {entry.crc32:08x})"
    except (OSError, CheckpointError) as err:
        problem = f"it cannot be read ({type(err).__name__}: {err})"
    if not problem:
        return True
    warnings.warn(
        f"{storage.uri(path)} of the previous checkpoint is damaged: {problem}. The new checkpoint gets "
        "a fresh copy of the file instead of a link to it. Run `cairn verify` on the previous checkpoint.",
        DamagedCheckpointWarning,
        stacklevel=2,
    )
    return False


def _size_crc(chunks: list[Chunk]) -> tuple[int, int]:
    crc, size = 0, 0
    for c in chunks:
        mv = memoryview(c).cast("B")
        crc = crc32(mv, crc)
        size += len(mv)
    return size, crc


def save(
    obj: Checkpointable,
    path: str | os.PathLike[str] | None,
    *,
    state: dict[str, Any] | None,
    filesystem: Any,
    allow_pickle: bool,
) -> str:
    """Save ``obj`` (or the given ``state``) as a checkpoint at ``path``; return the path."""
    if path is None:
        path = os.path.join(tempfile.gettempdir(), f"cairn-{uuid.uuid4().hex[:16]}")
    storage, final = resolve_storage(path, filesystem)
    if state is None:
        state = obj.get_state()
    plan = plan_save(obj, state, allow_pickle=allow_pickle)
    return commit_plan(storage, final, plan)


def commit_plan(
    storage: Storage,
    final: str,
    plan: _PlannedFolder,
    *,
    previous: FolderReader | None = None,
    stats: WriteStats | None = None,
) -> str:
    """Write a plan at ``final`` atomically (reusing unchanged files of ``previous``).

    Just before the root manifest, the storage checks that the staging place is
    still this save's (another writer on the root may have judged it abandoned
    and removed it): the save then fails instead of committing.
    """
    staging = storage.begin_write(final)
    try:
        files = _planned_files(plan)
        try:
            write_planned(
                storage,
                staging,
                plan,
                previous=previous,
                stats=stats,
                before_manifest=lambda: storage.check_owned(staging, files),
            )
        except CheckpointError as err:
            if isinstance(err.__cause__, FileNotFoundError):
                storage.check_owned(staging)  # a staging removed by another writer: say so
            raise
        storage.commit(staging, final)
    except BaseException:
        storage.abort(staging, final)
        raise
    return storage.uri(final)


def _planned_files(plan: _PlannedFolder, prefix: str = "") -> list[str]:
    """Every file a plan writes (``/``-separated, relative to its folder), but the root manifest."""
    out = [prefix + name for name in plan.files]
    for name, child in plan.children.items():
        out += _planned_files(child, f"{prefix}{name}/")
        out.append(f"{prefix}{name}/{MANIFEST}")
    return out


# --------------------------------------------------------------------------- read


@dataclass
class FolderReader:
    """Reads one checkpoint folder, verifying every byte against its manifest."""

    storage: Storage
    folder: str
    expected: FileEntry | None = None  # the parent's record of this folder's manifest
    depth: int = 0  # how many components down from the folder the reader was opened at
    _manifest: Manifest | None = None
    _metadata: dict[str, Any] | None = None
    _manifest_bytes: bytes | None = None  # exactly what was read, to notice a concurrent overwrite

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
            data = self.storage.read_file(path, max_bytes=MAX_JSON_BYTES)
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
        except (IsADirectoryError, NotADirectoryError) as err:
            # A hostile or damaged tree: a file where a folder should be, or the reverse.
            raise CorruptCheckpointError(
                f"{self.where(MANIFEST)} cannot be read: {err.strerror or err}; the checkpoint's folder "
                "structure is damaged."
            ) from err
        if self.expected is not None:
            self._check(data, self.expected, MANIFEST)
        self._manifest_bytes = bytes(data)
        return Manifest.from_bytes(data, where=self.where(MANIFEST))

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
        """A new reader of the same folder, reading everything afresh."""
        return FolderReader(self.storage, self.folder, expected=self.expected, depth=self.depth)

    def _check(self, data: bytes | bytearray | memoryview, entry: FileEntry, name: str) -> None:
        if len(data) != entry.size:
            raise CorruptCheckpointError(
                f"{self.where(name)} is {len(data)} bytes but the manifest records {entry.size}; the file "
                "is truncated or was changed after the save. Restore it from a good copy."
            )
        crc = crc32(data)
        if crc != entry.crc32:
            raise CorruptCheckpointError(
                f"{self.where(name)} fails its checksum (crc32 {crc:08x}, manifest says "
                f"{entry.crc32:08x}): the file is corrupted. Restore it from a good copy."
            )

    def read(self, name: str, *, max_bytes: int | None = None) -> bytearray:
        """Read a file listed in the manifest and verify it."""
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

    @property
    def metadata(self) -> dict[str, Any]:
        """The verified ``metadata.json``."""
        if self._metadata is None:
            meta = load_json(self.read(METADATA, max_bytes=MAX_JSON_BYTES), where=self.where(METADATA))
            if not isinstance(meta, dict):
                raise CorruptCheckpointError(f"{self.where(METADATA)} is not a JSON object.")
            version = meta.get("format_version")
            if type(version) is not int or version < 1:
                raise CorruptCheckpointError(f"{self.where(METADATA)} has an invalid format_version {version!r}.")
            if version > FORMAT_VERSION:
                raise IncompatibleCheckpointError(
                    f"{self.where(METADATA)} is in checkpoint format {version}, newer than the format "
                    f"{FORMAT_VERSION} this cairn reads. Upgrade cairn to load it."
                )
            for key, typ in (("class", str), ("state_version", int), ("uses_pickle", bool)):
                if not isinstance(meta.get(key), typ):
                    raise CorruptCheckpointError(f"{self.where(METADATA)} lacks a valid {key!r}.")
            self._metadata = meta
        return self._metadata

    def child(self, name: str) -> FolderReader:
        """The reader of component ``name``'s folder."""
        if name not in self.manifest.components:
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

    def ctor(self, allow_pickle: bool) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """The recorded constructor arguments."""
        from cairn.codec.ctor import decode_ctor

        self.check_pickle(allow_pickle)
        obj = load_json(self.read(CTOR, max_bytes=MAX_JSON_BYTES), where=self.where(CTOR))
        return decode_ctor(obj, allow_pickle=allow_pickle, where=self.where(CTOR))

    def tensor_source(self) -> MemoryTensorFile | StreamedTensorFile | None:
        """The folder's tensor file, or None when it has none.

        Files on other storage are read whole and verified here. A local file's size
        and header are checked here; its checksum by ``verify()`` or ``read_all()``
        (see :func:`read_sources`).
        """
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
    ) -> dict[str, Any]:
        """Decode the verified ``state.msgpack``; arrays come from ``tensors``.

        With a streamed tensor file the arrays are only allocated (or taken from
        ``buffers``) here; they are filled by ``tensors.read_all()``.
        """
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
                cache[key] = tensors.get(name, kind, dtype, shape, dests.pop(name, None))
            return cache[key]

        state = decode_state(skeleton, load_array=load_array, allow_pickle=allow_pickle, where=where)
        if not isinstance(state, dict):
            raise CorruptCheckpointError(f"{where} does not hold a dict.")
        return state

    def state(self, allow_pickle: bool) -> dict[str, Any]:
        """The folder's own state (without its components), verified and decoded."""
        self.check_pickle(allow_pickle)
        skeleton = self.read(STATE)
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


class _ReadRace(CheckpointError):
    """A read of a fresh object failed; the caller that built the object decides to retry."""

    def __init__(self, cause: CheckpointError, *, changed: bool) -> None:
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
        if attempt:
            time.sleep(_RETRY_DELAYS[min(attempt, len(_RETRY_DELAYS)) - 1])
            reader = reader.reopened()
        try:
            return read(reader)
        except CheckpointNotFoundError as err:
            seen = seen or reader._manifest_bytes is not None
            # Object stores delete the old root manifest first when a save replaces a
            # checkpoint: a folder without one may be mid-overwrite. On disks with atomic
            # renames it never is, and a missing manifest is final.
            if not seen and (reader.storage.atomic_rename or not _exists(reader)):
                raise
            last = err
        except (CorruptCheckpointError, _ReadRace) as err:
            seen = seen or reader._manifest_bytes is not None
            changed = err.changed if isinstance(err, _ReadRace) else reader.changed()
            cause = err.cause if isinstance(err, _ReadRace) else err
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


# --------------------------------------------------------------------------- restore


@dataclass
class LoadedFolder:
    """A folder's own state (brought to the class's STATE_VERSION) and its loaded components."""

    state: dict[str, Any]
    children: dict[str, LoadedFolder]
    version: int = 0  # the STATE_VERSION recorded in the folder
    where: str = ""  # the folder it was read from, for error messages


def _check_class(target: Checkpointable, reader: FolderReader) -> None:
    recorded = reader.metadata["class"]
    try:
        rec_cls = resolve_class(recorded, where=reader.where(METADATA), expected=type(target))
    except CheckpointError:
        return  # Restoring into an existing object needs only the state, not the class.
    t = type(target)
    if not (issubclass(t, rec_cls) or issubclass(rec_cls, t)):
        raise IncompatibleCheckpointError(
            f"The checkpoint at {reader.where()} holds a {recorded}, which cannot be restored into a "
            f"{class_path(t)}. Restore it into a {rec_cls.__qualname__}, or use "
            f"{rec_cls.__qualname__}.from_checkpoint()."
        )


def upgrade(cls: type[Checkpointable], state: dict[str, Any], from_version: int, where: str) -> dict[str, Any]:
    """Bring a state from ``from_version`` to ``cls.STATE_VERSION``, one step at a time."""
    target = int(cls.STATE_VERSION)
    if from_version == target:
        return state
    if from_version > target:
        raise IncompatibleCheckpointError(
            f"The state at {where} has STATE_VERSION {from_version}, newer than {cls.__qualname__}'s "
            f"STATE_VERSION {target}. Load it with the newer version of the code that wrote it."
        )
    for v in range(from_version, target):
        try:
            new_state = cls.upgrade_state(state, v)
        except IncompatibleCheckpointError:
            raise
        except NotImplementedError as err:
            raise IncompatibleCheckpointError(
                f"The state at {where} has STATE_VERSION {from_version}, but {cls.__qualname__} is at "
                f"version {target} and has no upgrade from version {v} to {v + 1}. Implement "
                f"{cls.__qualname__}.upgrade_state for it."
            ) from err
        except Exception as err:
            raise IncompatibleCheckpointError(
                f"{cls.__qualname__}.upgrade_state failed upgrading the state at {where} from version "
                f"{v} to {v + 1}: {type(err).__name__}: {err}"
            ) from err
        if not isinstance(new_state, dict):
            raise IncompatibleCheckpointError(
                f"{cls.__qualname__}.upgrade_state returned a {type(new_state).__name__} for version {v}; "
                "it must return the state dict."
            )
        state = new_state
    return state


@dataclass
class _VerifiedFolder:
    target: Checkpointable
    reader: FolderReader
    label: str
    skeleton: bytearray
    tensors: MemoryTensorFile | StreamedTensorFile | None
    children: dict[str, _VerifiedFolder]


def _verify_tree(
    target: Checkpointable,
    reader: FolderReader,
    *,
    allow_pickle: bool,
    label: str,
    opened: list[MemoryTensorFile | StreamedTensorFile],
) -> _VerifiedFolder:
    """Phase 1: read and verify every file the restore needs, decoding nothing."""
    _check_class(target, reader)
    reader.check_pickle(allow_pickle)
    # The constructor arguments are not needed to restore, but a damaged file anywhere in
    # the folders being restored must be reported, not left for a later from_checkpoint.
    reader.read(CTOR, max_bytes=MAX_JSON_BYTES)
    skeleton = reader.read(STATE)
    tensors = reader.tensor_source()
    if tensors is not None:
        opened.append(tensors)
    comps = checkpointable_components(target, where=label or "<root>")
    children: dict[str, _VerifiedFolder] = {}
    for name in reader.manifest.components:
        comp = comps.get(name)
        if comp is None:
            continue  # the target has no such component (e.g. fewer modules): not read
        children[name] = _verify_tree(
            comp,
            reader.child(name),
            allow_pickle=allow_pickle,
            label=f"{label}/{name}" if label else name,
            opened=opened,
        )
    return _VerifiedFolder(target, reader, label, skeleton, tensors, children)


def _decode_tree(v: _VerifiedFolder, allow_pickle: bool) -> tuple[LoadedFolder, int]:
    """Phase 2: decode every skeleton; arrays are allocated (or live buffers chosen), not yet read."""
    version = v.reader.metadata["state_version"]
    # Read in place only when no upgrade will run: an upgrade may fail or reshape the state.
    buffers = v.target.get_state_buffers() if version == v.target.STATE_VERSION else None
    state = v.reader.decode(v.skeleton, v.tensors, allow_pickle, buffers)
    children = {name: _decode_tree(child, allow_pickle) for name, child in v.children.items()}
    loaded = LoadedFolder(state, {n: c[0] for n, c in children.items()}, version, v.reader.where())
    return loaded, version


def _upgrade_tree(target: Checkpointable, loaded: LoadedFolder, reader: FolderReader, label: str) -> None:
    loaded.state = upgrade(
        type(target), loaded.state, loaded.version, f"{reader.where()} (component {label or '<root>'})"
    )
    comps = checkpointable_components(target, where=label or "<root>")
    for name, child in loaded.children.items():
        _upgrade_tree(comps[name], child, reader.child(name), f"{label}/{name}" if label else name)


def read_sources(sources: list[MemoryTensorFile | StreamedTensorFile], *, into_new_object: bool) -> None:
    """Verify and read every tensor file of a restore, so that a damaged file never touches live state.

    A file read only into fresh arrays is checked in the pass that reads it (one pass).
    A file some of whose tensors land in buffers the target already had (its
    ``get_state_buffers``) is verified by a pass of its own before any file is read
    into place, and its read is then checked once more: two passes, only there.
    ``into_new_object``: the target was just built by ``from_checkpoint`` and is dropped
    if the restore fails, so its buffers count as fresh.
    """
    live = [s for s in sources if s.live and not into_new_object]
    for source in live:
        source.verify()
    for source in sources:  # fresh arrays first: their checks all pass before a live buffer is written
        if not (source.live and not into_new_object):
            source.read_all()
    for source in live:
        source.read_all()


def load_folder(
    target: Checkpointable, reader: FolderReader, *, allow_pickle: bool, label: str, into_new_object: bool = False
) -> LoadedFolder:
    """Read, verify and decode ``reader``'s folder and the folders of ``target``'s components in it.

    Nothing of ``target`` is touched until every file is verified and every state decoded;
    tensors are then read into their destinations (see :func:`read_sources`), and states
    upgraded. ``into_new_object``: ``target`` was just built from this checkpoint and is
    dropped if the restore fails (``from_checkpoint``).
    """
    opened: list[MemoryTensorFile | StreamedTensorFile] = []
    try:
        verified = _verify_tree(target, reader, allow_pickle=allow_pickle, label=label, opened=opened)
        loaded, _ = _decode_tree(verified, allow_pickle)
        read_sources(opened, into_new_object=into_new_object)
    finally:
        for source in opened:
            source.close()
    _upgrade_tree(target, loaded, reader, label)
    return loaded


def apply_loaded(target: Checkpointable, loaded: LoadedFolder, label: str = "") -> None:
    """Apply loaded states bottom-up: components first, then the object's own state."""
    comps = checkpointable_components(target, where=label or "<root>")
    for name, child in loaded.children.items():
        apply_loaded(comps[name], child, f"{label}/{name}" if label else name)
    try:
        target.set_state(loaded.state)
    except CheckpointError:
        raise
    except Exception as err:
        # A state read from a file that does not fit (other code wrote it, or it was tampered
        # with) is the checkpoint's problem to report, never a raw TypeError from deep inside.
        raise IncompatibleCheckpointError(
            f"{type(target).__qualname__}.set_state failed on the state of component {label or '<root>'!r}"
            f"{' read from ' + loaded.where if loaded.where else ''}: {type(err).__name__}: {err}. The "
            "checkpoint's state does not fit this object: it was written by other code, or tampered with."
        ) from err


def open_checkpoint(path: str | os.PathLike[str], filesystem: Any) -> FolderReader:
    """A reader for the checkpoint folder at ``path``."""
    storage, folder = resolve_storage(path, filesystem)
    storage.check_committed(folder)  # object stores: not a sub-folder of a save in flight
    return FolderReader(storage, folder)


def restore(
    obj: Checkpointable,
    path: str | os.PathLike[str],
    *,
    component: str | None,
    filesystem: Any,
    allow_pickle: bool,
    built_from: bytes | None = None,
) -> None:
    """Restore ``obj`` (or its subcomponent ``component``) from the checkpoint folder ``path``.

    ``built_from``: ``obj`` was just constructed by ``from_checkpoint`` from the
    checkpoint whose root manifest is these bytes. The restore then reads that
    version or fails with a race for ``from_checkpoint`` to retry with a new object,
    and reads tensor files into ``obj``'s buffers in one pass (a failed restore
    drops ``obj``).
    """
    target = obj if not component else find_component(obj, component)
    reader = open_checkpoint(path, filesystem)
    label = component.strip("/") if component else ""
    if built_from is None:
        loaded = read_consistently(reader, lambda r: load_folder(target, r, allow_pickle=allow_pickle, label=label))
    else:
        # Any retry must build a new object, so the race goes back to from_checkpoint.
        try:
            if reader.manifest_bytes() != built_from:
                raise _ReadRace(
                    CheckpointError(f"{reader.where(MANIFEST)} changed after the object was built."), changed=True
                )
            loaded = load_folder(target, reader, allow_pickle=allow_pickle, label=label, into_new_object=True)
        except CorruptCheckpointError as err:
            raise _ReadRace(err, changed=reader.changed()) from err
    apply_loaded(target, loaded, label)


def build_from_checkpoint(
    cls: type[Checkpointable],
    path: str | os.PathLike[str],
    *,
    filesystem: Any,
    allow_pickle: bool,
    ctor_overrides: dict[str, Any],
) -> Checkpointable:
    """Construct the recorded class with the recorded (or overridden) arguments, then restore it.

    Constructor arguments and state come from one version of the checkpoint, even when
    another process saves over ``path`` meanwhile (see :func:`read_consistently`).
    """
    return read_consistently(
        open_checkpoint(path, filesystem),
        lambda reader: _build_once(
            cls, reader, path, filesystem=filesystem, allow_pickle=allow_pickle, ctor_overrides=ctor_overrides
        ),
    )


def _build_once(
    cls: type[Checkpointable],
    reader: FolderReader,
    path: str | os.PathLike[str],
    *,
    filesystem: Any,
    allow_pickle: bool,
    ctor_overrides: dict[str, Any],
) -> Checkpointable:
    import inspect

    reader.check_pickle(allow_pickle)
    recorded = reader.metadata["class"]
    # The class the caller passed may be taken even from a script's __main__: the caller chose it.
    rec_cls = resolve_class(recorded, where=reader.where(METADATA), expected=cls)
    if not issubclass(rec_cls, cls):
        raise IncompatibleCheckpointError(
            f"The checkpoint at {reader.where()} holds a {recorded}, which is not a "
            f"{class_path(cls)} (nor a subclass). Load it with {rec_cls.__qualname__}.from_checkpoint() "
            "or cairn.Checkpointable.from_checkpoint()."
        )
    args, kwargs = reader.ctor(allow_pickle)
    if ctor_overrides:
        try:
            sig = inspect.signature(rec_cls)
            bound = sig.bind_partial(*args, **kwargs)
        except (TypeError, ValueError) as err:
            raise IncompatibleCheckpointError(
                f"The constructor arguments recorded at {reader.where(CTOR)} no longer fit "
                f"{rec_cls.__qualname__}{inspect.signature(rec_cls)}: {err}."
            ) from err
        params = sig.parameters
        takes_var_kw = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
        for key, value in ctor_overrides.items():
            if key in params and params[key].kind not in (
                inspect.Parameter.VAR_POSITIONAL,
                inspect.Parameter.VAR_KEYWORD,
            ):
                bound.arguments[key] = value
            elif takes_var_kw:
                bound.arguments.setdefault(
                    next(n for n, p in params.items() if p.kind is inspect.Parameter.VAR_KEYWORD), {}
                )[key] = value
            else:
                raise CheckpointError(
                    f"{key!r} is not a constructor parameter of {rec_cls.__qualname__}; it takes: "
                    f"{', '.join(params) or '(nothing)'}."
                )
        args, kwargs = bound.args, bound.kwargs
    try:
        obj = rec_cls(*args, **kwargs)
    except CheckpointError:
        raise
    except Exception as err:  # the arguments come from a file: any error is the checkpoint's to report
        raise IncompatibleCheckpointError(
            f"Cannot construct {rec_cls.__qualname__} with the arguments recorded at "
            f"{reader.where(CTOR)}: {type(err).__name__}: {err}. Pass the changed arguments as keywords "
            "to from_checkpoint()."
        ) from err
    obj._restore_checkpoint(
        path, component=None, filesystem=filesystem, allow_pickle=allow_pickle, built_from=reader.manifest_bytes()
    )
    return obj


def iter_folders(reader: FolderReader, label: str = "") -> Iterator[tuple[str, FolderReader]]:
    """Every folder of a checkpoint, depth first, with its component path."""
    yield label, reader
    for name in reader.manifest.components:
        yield from iter_folders(reader.child(name), f"{label}/{name}" if label else name)


def verify(
    path: str | os.PathLike[str], filesystem: Any = None, *, progress: Callable[[int, int], None] | None = None
) -> list[str]:
    """Check every file of a checkpoint against its manifest; return the problems found.

    Tensor files on local disk are streamed (never held in memory whole).
    ``progress(bytes_checked, bytes_total)`` is called after each file.
    """
    root = open_checkpoint(path, filesystem)
    root.manifest  # noqa: B018 - a missing or bad root manifest raises: nothing else can be checked

    def run(reader: FolderReader) -> list[str]:
        problems = _verify_once(reader, progress)
        if problems:  # raised so that a concurrent overwrite is told apart from damage
            raise _Problems(problems)
        return problems

    try:
        # A damaged file is reported at once (no second read); only an overwrite retries.
        return read_consistently(root, run, confirm=False)
    except _Problems as found:
        return found.problems


class _Problems(CorruptCheckpointError):
    def __init__(self, problems: list[str]) -> None:
        super().__init__(problems[0])
        self.problems = problems


def _verify_once(root: FolderReader, progress: Callable[[int, int], None] | None) -> list[str]:
    problems: list[str] = []
    total = 0
    if progress is not None:
        for _, r in iter_folders_lenient(root):
            total += sum(e.size for n, e in r.manifest.files.items() if not n.endswith("/" + MANIFEST))
    done = [0]

    def walk(reader: FolderReader) -> None:
        try:
            manifest = reader.manifest
        except CheckpointError as err:
            problems.append(str(err))
            return
        for name, entry in manifest.files.items():
            if name.endswith("/" + MANIFEST):
                continue
            try:
                if name == TENSORS:
                    source = reader.tensor_source()
                    if source is not None:
                        try:
                            source.verify()
                        finally:
                            source.close()
                else:
                    data = reader.read(name)
                    if name in (METADATA, CTOR):
                        load_json(data, where=reader.where(name))
            except CheckpointError as err:
                problems.append(str(err))
            done[0] += entry.size
            if progress is not None:
                progress(done[0], total)
        for comp in manifest.components:
            try:
                child = reader.child(comp)
            except CheckpointError as err:
                problems.append(str(err))
                continue
            walk(child)

    walk(root)
    return problems


def iter_folders_lenient(reader: FolderReader, label: str = "") -> Iterator[tuple[str, FolderReader]]:
    """Like :func:`iter_folders`, skipping folders whose manifest cannot be read."""
    try:
        comps = reader.manifest.components
    except CheckpointError:
        return
    yield label, reader
    for name in comps:
        yield from iter_folders_lenient(reader.child(name), f"{label}/{name}" if label else name)

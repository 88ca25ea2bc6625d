"""Checkpoint tools behind the command line: verify, inspect, diff, extract, upgrade.

All of them work on any storage and never import the classes recorded in a
checkpoint, except ``upgrade`` (which must run their ``upgrade_state``).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from cairn import _reader, _verify
from cairn.codec.tensors import MAX_HEADER_BYTES, parse_header
from cairn.errors import CheckpointError, ComponentNotFoundError, CorruptCheckpointError
from cairn.manifest import MANIFEST, STANDARD_METADATA_KEYS, TENSORS

if TYPE_CHECKING:
    import numpy as np

__all__ = [
    "ComponentInfo",
    "diff_checkpoints",
    "extract_component",
    "inspect_checkpoint",
    "pack_checkpoint",
    "upgrade_checkpoint",
    "verify_checkpoint",
]


def verify_checkpoint(
    path: str | os.PathLike[str], *, filesystem: Any = None, progress: Callable[[int, int], None] | None = None
) -> list[str]:
    """Check every file of the checkpoint at ``path`` against its manifest.

    ``progress(bytes_checked, bytes_total)`` is called after each file.

    Returns:
        One message per broken file (empty when the checkpoint is sound).

    Raises:
        CheckpointNotFoundError: No committed checkpoint at ``path``.
        CorruptCheckpointError: The root manifest itself is unreadable.
    """
    return _verify.verify(path, filesystem, progress=progress)


@dataclass
class TensorInfo:
    """A tensor of a component: dtype and shape as stored."""

    name: str
    dtype: str
    shape: list[int]
    nbytes: int


@dataclass
class ComponentInfo:
    """One folder of a checkpoint, as ``cairn inspect`` shows it."""

    path: str
    cls: str
    state_version: int
    format_version: int
    cairn_version: str
    uses_pickle: bool
    size: int
    tensors: list[TensorInfo] = field(default_factory=list)
    metadata: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """A JSON-able dict."""
        return {
            "path": self.path,
            "class": self.cls,
            "state_version": self.state_version,
            "format_version": self.format_version,
            "cairn_version": self.cairn_version,
            "uses_pickle": self.uses_pickle,
            "size": self.size,
            "tensors": [t.__dict__ for t in self.tensors],
            "metadata": self.metadata,
        }


def _tensor_header(reader: _reader.FolderReader) -> list[TensorInfo]:
    """Read only the header of the folder's tensor file (not the tensors)."""
    if TENSORS in reader.manifest.packed:
        # A small tensor file packed with the metadata (read and verified already): parse it whole.
        records, _ = parse_header(memoryview(reader.read(TENSORS)), where=reader.where(TENSORS))
        return [TensorInfo(name, r.st_dtype, list(r.shape), r.end - r.begin) for name, r in records.items()]
    if TENSORS not in reader.manifest.files:
        return []
    storage = reader.storage
    path = storage.join(reader.folder, TENSORS)
    where = reader.where(TENSORS)
    entry = reader.manifest.files[TENSORS]
    # The first read goes through the storage's opener, which refuses links, pipes and
    # devices by name; then every length read from the file is checked against its real
    # size (and the header bound) before anything more is read: a header may claim 2**36.
    try:
        head = storage.read_range(path, 0, 8)
        real = storage.size(path)
    except FileNotFoundError as err:
        raise CorruptCheckpointError(
            f"{where} is missing, though the manifest lists it; the checkpoint is damaged."
        ) from err
    except OSError as err:
        raise CorruptCheckpointError(f"{where} cannot be read: {err}.") from err
    if real != entry.size:
        raise CorruptCheckpointError(
            f"{where} is {real} bytes but the manifest records {entry.size}; the file is truncated or was "
            "changed after the save. Restore it from a good copy."
        )
    if len(head) < 8:
        raise CorruptCheckpointError(f"{where} is truncated: too short for a safetensors header.")
    n = int.from_bytes(head[:8], "little")
    if n > MAX_HEADER_BYTES or 8 + n > real:
        raise CorruptCheckpointError(
            f"{where}: the safetensors header claims {n} bytes, but the file has {real} bytes (and headers are "
            f"at most {MAX_HEADER_BYTES}); the file is corrupt or hostile."
        )
    header = storage.read_range(path, 0, 8 + n)
    if len(header) != 8 + n:
        raise CorruptCheckpointError(f"{where} became shorter while its header was read.")
    # parse_header checks the tiling against the file size; give it the recorded size.
    from cairn._tensorio import SizedView

    padded = SizedView(header, entry.size)
    records, _ = parse_header(padded, where=reader.where(TENSORS))  # type: ignore[arg-type]
    return [TensorInfo(name, r.st_dtype, list(r.shape), r.end - r.begin) for name, r in records.items()]


def inspect_checkpoint(path: str | os.PathLike[str], *, filesystem: Any = None) -> list[ComponentInfo]:
    """Describe every folder of a checkpoint from its manifests, metadata and tensor headers.

    Reads no tensor data, so it is fast on large checkpoints.
    """
    out = []
    for label, reader in _reader.iter_folders(_reader.open_checkpoint(path, filesystem)):
        meta = reader.metadata
        size = sum(e.size for n, e in reader.manifest.files.items() if not n.endswith("/" + MANIFEST))
        out.append(
            ComponentInfo(
                path=label or ".",
                cls=str(meta["class"]),
                state_version=int(meta["state_version"]),
                format_version=int(meta["format_version"]),
                cairn_version=str(meta.get("cairn_version", "?")),
                uses_pickle=bool(meta["uses_pickle"]),
                size=size,
                tensors=_tensor_header(reader),
                metadata={k: v for k, v in meta.items() if k not in STANDARD_METADATA_KEYS},
            )
        )
    return out


@dataclass
class Difference:
    """One difference between two checkpoints."""

    component: str
    key: str
    kind: str  # "only_in_a", "only_in_b", "changed", "type", "shape"
    detail: str
    max_abs_diff: float | None = None

    def to_json(self) -> dict[str, Any]:
        """A JSON-able dict."""
        return dict(self.__dict__)


def _flatten(tree: Any, prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    if isinstance(tree, dict):
        for k, v in tree.items():
            out.update(_flatten(v, f"{prefix}/{k}" if prefix else str(k)))
    elif isinstance(tree, list | tuple):
        for i, v in enumerate(tree):
            out.update(_flatten(v, f"{prefix}/{i}" if prefix else str(i)))
        if not tree:
            out[prefix] = tree
    else:
        out[prefix] = tree
    return out


def _as_numpy(v: Any) -> np.ndarray | None:
    import numpy as np

    if isinstance(v, np.ndarray):
        return v
    if type(v).__module__.startswith("torch") and hasattr(v, "numpy"):
        import torch

        if v.dtype == torch.bfloat16:
            v = v.float()
        try:
            return np.asarray(v.detach().cpu().numpy())
        except TypeError:
            return np.asarray(v.float().numpy())
    return None


def _compare_values(comp: str, key: str, a: Any, b: Any) -> Difference | None:
    import numpy as np

    aa, bb = _as_numpy(a), _as_numpy(b)
    if aa is not None and bb is not None:
        if aa.shape != bb.shape or aa.dtype != bb.dtype:
            return Difference(comp, key, "shape", f"{aa.dtype}{list(aa.shape)} vs {bb.dtype}{list(bb.shape)}")
        if aa.tobytes() == bb.tobytes():
            return None
        diff = None
        if aa.dtype.kind in "fiucb" and aa.size:
            with np.errstate(all="ignore"):
                diff = float(np.nanmax(np.abs(aa.astype(np.float64) - bb.astype(np.float64))))
        return Difference(comp, key, "changed", f"{aa.dtype}{list(aa.shape)}", diff)
    if type(a) is not type(b):
        return Difference(comp, key, "type", f"{type(a).__name__} vs {type(b).__name__}")
    if a != b and not (isinstance(a, float) and a != a and b != b):
        return Difference(
            comp,
            key,
            "changed",
            f"{a!r} -> {b!r}" if len(repr(a)) < 80 else "value changed",
            abs(a - b) if isinstance(a, int | float) and not isinstance(a, bool) else None,
        )
    return None


def diff_checkpoints(
    path_a: str, path_b: str, *, filesystem: Any = None, allow_pickle: bool = False
) -> list[Difference]:
    """The components and values that differ between two checkpoints (verified reads)."""
    ra = dict(_reader.iter_folders(_reader.open_checkpoint(path_a, filesystem)))
    rb = dict(_reader.iter_folders(_reader.open_checkpoint(path_b, filesystem)))
    diffs: list[Difference] = []
    for comp in sorted(set(ra) | set(rb)):
        name = comp or "."
        if comp not in rb:
            diffs.append(Difference(name, "", "only_in_a", "component only in A"))
            continue
        if comp not in ra:
            diffs.append(Difference(name, "", "only_in_b", "component only in B"))
            continue
        a, b = ra[comp], rb[comp]
        if a.metadata["class"] != b.metadata["class"]:
            diffs.append(Difference(name, "<class>", "type", f"{a.metadata['class']} vs {b.metadata['class']}"))
        fa, fb = _flatten(a.state(allow_pickle)), _flatten(b.state(allow_pickle))
        for key in sorted(set(fa) | set(fb)):
            if key not in fb:
                diffs.append(Difference(name, key, "only_in_a", "key only in A"))
            elif key not in fa:
                diffs.append(Difference(name, key, "only_in_b", "key only in B"))
            else:
                d = _compare_values(name, key, fa[key], fb[key])
                if d is not None:
                    diffs.append(d)
    return diffs


def extract_component(path: str, component: str, out: str, *, filesystem: Any = None) -> str:
    """Copy one component's folder out of a checkpoint as a standalone, verified checkpoint."""
    reader = _reader.open_checkpoint(path, filesystem)
    for part in [p for p in component.strip("/").split("/") if p]:
        try:
            reader = reader.child(part)
        except ComponentNotFoundError as err:
            raise ComponentNotFoundError(f"Cannot extract {component!r}: {err}") from err
    problems = _verify.verify(reader.storage.uri(reader.folder), filesystem)
    if problems:
        raise CorruptCheckpointError(f"Cannot extract {component!r}; the source is damaged: {problems[0]}")
    from cairn.storage.resolve import resolve_storage

    dst_storage, final = resolve_storage(out, filesystem)
    staging = dst_storage.begin_write(final)
    try:
        _copy_tree(reader, dst_storage, staging)
        dst_storage.commit(staging, final)
    except BaseException:
        dst_storage.abort(staging, final)
        raise
    written = dst_storage.uri(final)
    problems = _verify.verify(written, filesystem)
    if problems:
        raise CorruptCheckpointError(f"The extracted checkpoint at {written} does not verify: {problems[0]}")
    return written


def _copy_tree(reader: _reader.FolderReader, storage: Any, folder: str) -> None:
    storage.makedirs(folder)
    for comp in reader.manifest.components:
        _copy_tree(reader.child(comp), storage, storage.join(folder, comp))
    for name in reader.manifest.files:
        if "/" in name:
            continue
        storage.write_file(storage.join(folder, name), [reader.read(name)])
    raw = reader.manifest_bytes()  # the verified bytes, not a second (unbounded) read
    storage.write_file(storage.join(folder, MANIFEST), [raw])


def pack_checkpoint(path: str | os.PathLike[str], out: str | os.PathLike[str], *, filesystem: Any = None) -> str:
    """Write the checkpoint at ``path`` into one zip file ``out``, verified before and after.

    The zip holds exactly the files the checkpoint's manifests list (read through the
    verified reader, so a damaged source is refused before anything is written), at the
    zip's root. Every loader takes it as it takes a folder: ``X.from_checkpoint("zip://::"
    + out)`` (fsspec's zip filesystem), and ``cairn.rl.inference.Policy.from_checkpoint(out)``.
    The file is written beside ``out`` and renamed into place, so ``out`` is whole or absent.

    Returns:
        The zip's URL for loaders: ``"zip://::<absolute out>"``.

    Raises:
        CorruptCheckpointError: The source or the written zip does not verify.
        FileExistsError: ``out`` exists.
    """
    import tempfile
    import zipfile

    final = os.path.abspath(os.fspath(out))
    if os.path.exists(final):
        raise FileExistsError(f"{final} exists; cairn pack does not overwrite: remove it or choose another name.")
    problems = _verify.verify(str(path), filesystem)
    if problems:
        raise CorruptCheckpointError(f"Cannot pack {path}; it is damaged: {problems[0]}")
    reader = _reader.open_checkpoint(str(path), filesystem)
    handle, staging = tempfile.mkstemp(prefix=".cairn-pack-", suffix=".zip", dir=os.path.dirname(final))
    os.close(handle)
    try:
        with zipfile.ZipFile(staging, "w", compression=zipfile.ZIP_DEFLATED) as archive:
            _zip_tree(reader, archive, "")
        os.replace(staging, final)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.remove(staging)
        raise
    url = f"zip://::{final}"
    problems = _verify.verify(url, None)
    if problems:
        raise CorruptCheckpointError(f"The packed checkpoint {final} does not verify: {problems[0]}")
    return url


def _zip_tree(reader: _reader.FolderReader, archive: Any, prefix: str) -> None:
    for comp in reader.manifest.components:
        _zip_tree(reader.child(comp), archive, f"{prefix}{comp}/")
    for name in reader.manifest.files:
        if "/" not in name:
            archive.writestr(prefix + name, reader.read(name))
    archive.writestr(prefix + MANIFEST, reader.manifest_bytes())


def format_version_of(path: str | os.PathLike[str], *, filesystem: Any = None) -> int:
    """The checkpoint format version of the checkpoint at ``path`` (its root manifest's, checked).

    ``cairn upgrade`` rewrites a checkpoint of an older format (format 1: CRC-32 only)
    in the current one (:data:`cairn.FORMAT_VERSION`).
    """
    return _reader.open_checkpoint(path, filesystem).manifest.format_version


def upgrade_checkpoint(
    path: str,
    out: str | None,
    *,
    dry_run: bool = False,
    filesystem: Any = None,
    allow_pickle: bool = False,
    trusted: Iterable[Any] | None = None,
) -> list[tuple[str, str, int, int]]:
    """Bring every component to its class's current ``STATE_VERSION``, in the current checkpoint format.

    The new checkpoint is written in :data:`cairn.FORMAT_VERSION` whatever the
    format of ``path`` (see :func:`format_version_of`). The classes it names resolve
    through the allow-list (SPEC 8), with ``trusted`` as in
    :meth:`~cairn.Checkpointable.from_checkpoint` (``cairn upgrade --trust module:name``).

    Returns:
        (component, class, from_version, to_version) for every folder.
    """
    from cairn.checkpointable import Checkpointable
    from cairn.registry import Trusted, resolve_class

    allowed = Trusted.of(trusted)
    root = _reader.open_checkpoint(path, filesystem)
    changes: list[tuple[str, str, int, int]] = []
    for label, reader in _reader.iter_folders(root):
        cls = resolve_class(str(reader.metadata["class"]), where=reader.where("metadata.json"), trusted=allowed)
        if not issubclass(cls, Checkpointable):
            raise CheckpointError(f"{reader.where()} names {cls.__qualname__}, not a Checkpointable.")
        changes.append(
            (label or ".", reader.metadata["class"], int(reader.metadata["state_version"]), int(cls.STATE_VERSION))
        )
    if dry_run:
        return changes
    if out is None:
        raise CheckpointError("upgrade needs an output path (or dry_run=True).")
    obj = Checkpointable.from_checkpoint(path, filesystem=filesystem, allow_pickle=allow_pickle, trusted=trusted)
    obj.save_to_path(out, filesystem=filesystem, allow_pickle=allow_pickle)
    problems = _verify.verify(out, filesystem)
    if problems:
        raise CorruptCheckpointError(f"The upgraded checkpoint at {out} does not verify: {problems[0]}")
    return changes

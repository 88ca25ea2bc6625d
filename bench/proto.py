"""Prototype patches of cairn, applied by ``python -m bench --proto`` to measure proposed changes.

Nothing here is imported by cairn. Each patch is the smallest working version
of a proposal in ``.notes-bench.md``, monkeypatched over the engine so that
the suite can measure its gain on the same machine in the same way:

P1  restore: verify the tensor file by streaming (CRC in 16 MB chunks through
    one reused buffer) instead of reading it whole into a fresh ``bytearray``;
    then, once every needed file of every folder is verified, read each tensor
    with ``preadv`` straight into its destination: the component's live tensor
    when the component offers it (``get_state_buffers()``, opt-in), else a
    fresh ``torch.empty``/``np.empty`` of the right shape.
P2  save: compute the CRC-32 of chunk i+1 in a helper thread while chunk i is
    written (``zlib.crc32`` and ``os.write`` both release the GIL), and start
    the device write-back every 64 MB (``sync_file_range``) so that the final
    ``fsync`` waits only for the tail.
P4  commit: write every file without fsync and fsync them all in one pass at
    commit (before the folders' fsync and the rename): one journal commit per
    checkpoint instead of one per file; small RL checkpoints save 2-3x faster.
P3  (landed upstream in 7defa02; kept for the record, applied only when named)
    async save: copy the snapshot into buffers kept from the previous save
    (same shapes and dtypes), so that each save does not fault in a fresh copy
    of the whole state.
"""

from __future__ import annotations

import ctypes
import os
import sys
import zlib
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

CHUNK = 16 << 20
_CRC_POOL: list[ThreadPoolExecutor] = []

# --------------------------------------------------------------------------- P1: restore


class _SizedView:
    """A header buffer that reports the whole file's length (parse_header checks the tiling)."""

    def __init__(self, data: bytes, size: int) -> None:
        self.data, self.size = data, size

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, item: Any) -> Any:
        return self.data[item]


def _leaf_map(tree: Any) -> dict[str, Any]:
    """``"/".join(path)`` -> leaf, the naming rule of the encoder; ambiguous names are dropped."""
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


def _byte_view(value: Any, kind: int, dtype: Any, shape: list[int]) -> memoryview | None:
    """A writable byte view of ``value`` when it can receive this array as it is, else None."""
    from cairn.codec.state import KIND_NUMPY, numpy_dtype_from_descr

    torch = sys.modules.get("torch")
    if kind == KIND_NUMPY:
        if not isinstance(value, np.ndarray) or not value.flags.c_contiguous or not value.flags.writeable:
            return None
        try:
            want = numpy_dtype_from_descr(dtype, where="")
        except Exception:
            return None
        if value.dtype != want or list(value.shape) != list(shape):
            return None
        return memoryview(value.reshape(-1).view(np.uint8)) if value.size else None
    if torch is None or not isinstance(value, torch.Tensor):
        return None
    if (
        value.device.type != "cpu"
        or not value.is_contiguous()
        or value.requires_grad
        or str(value.dtype).removeprefix("torch.") != dtype
        or list(value.shape) != list(shape)
        or value.numel() == 0
    ):
        return None
    return memoryview(value.reshape(-1).view(torch.uint8).numpy())


def _fresh(kind: int, dtype: Any, shape: list[int]) -> tuple[Any, memoryview | None]:
    from cairn.codec.state import KIND_NUMPY, numpy_dtype_from_descr

    if kind == KIND_NUMPY:
        a = np.empty(shape, numpy_dtype_from_descr(dtype, where=""))
        return a, (memoryview(a.reshape(-1).view(np.uint8)) if a.size else None)
    import torch

    t = torch.empty(shape, dtype=getattr(torch, dtype))
    return t, (memoryview(t.reshape(-1).view(torch.uint8).numpy()) if t.numel() else None)


class _Node:
    def __init__(self, target: Any, reader: Any, label: str) -> None:
        self.target, self.reader, self.label = target, reader, label
        self.skeleton: bytes = b""
        self.records: dict[str, Any] | None = None
        self.fd: int | None = None
        self.fallback: Any = None  # a verified in-memory _TensorFile (non-local storage)
        self.children: dict[str, _Node] = {}


def _stream_verify(node: _Node) -> None:
    """Phase 1 for the tensor file: CRC and size by streaming; parse the header."""
    from cairn._engine import _TensorFile
    from cairn.codec.tensors import parse_header
    from cairn.errors import CorruptCheckpointError
    from cairn.manifest import TENSORS
    from cairn.storage.local import LocalStorage

    reader = node.reader
    if not isinstance(reader.storage, LocalStorage):
        node.fallback = _TensorFile(reader.read(TENSORS), reader.where(TENSORS))
        return
    entry = reader.manifest.files.get(TENSORS)
    if entry is None:
        raise CorruptCheckpointError(f"{reader.where(TENSORS)} is not listed in the folder's manifest.")
    path = reader.storage.join(reader.folder, TENSORS)
    try:
        fd = reader.storage._open_read(path)
    except FileNotFoundError as err:
        raise CorruptCheckpointError(f"{reader.where(TENSORS)} is missing, though the manifest lists it.") from err
    node.fd = fd
    size = os.fstat(fd).st_size
    if size != entry.size:
        raise CorruptCheckpointError(
            f"{reader.where(TENSORS)} is {size} bytes but the manifest records {entry.size}; the file "
            "is truncated or was changed after the save."
        )
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)
    # Double buffering: the CRC of chunk i runs in a helper thread while chunk i+1 is read
    # (both release the GIL), so the check costs little more than the read itself.
    pool = _crc_pool()
    bufs = [memoryview(b) for b in _chunk_buffers()]
    crc = [0]

    def crc_of(mv: memoryview) -> None:
        crc[0] = zlib.crc32(mv, crc[0])

    off, i, pending = 0, 0, None
    while off < size:
        mv = bufs[i % 2]
        n = os.preadv(fd, [mv[: min(CHUNK, size - off)]], off)
        if n == 0:
            break
        if pending is not None:
            pending.result()
        pending = pool.submit(crc_of, mv[:n])
        off += n
        i += 1
    if pending is not None:
        pending.result()
    crc = crc[0]
    if off != size or crc != entry.crc32:
        raise CorruptCheckpointError(
            f"{reader.where(TENSORS)} fails its checksum (crc32 {crc:08x}, manifest says {entry.crc32:08x}): "
            "the file is corrupted. Restore it from a good copy."
        )
    head = os.pread(fd, 8, 0)
    n = int.from_bytes(head, "little") if len(head) == 8 else 0
    header = os.pread(fd, 8 + min(n, size), 0)
    node.records, _ = parse_header(_SizedView(header, size), where=reader.where(TENSORS))  # type: ignore[arg-type]


_BUF: list[np.ndarray] = []


def _chunk_buffers() -> list[np.ndarray]:
    if not _BUF:
        _BUF.extend([np.empty(CHUNK, np.uint8), np.empty(CHUNK, np.uint8)])
    return _BUF


def _crc_pool() -> ThreadPoolExecutor:
    if not _CRC_POOL:
        _CRC_POOL.append(ThreadPoolExecutor(1, thread_name_prefix="cairn-crc"))
    return _CRC_POOL[0]


def _phase1(target: Any, reader: Any, allow_pickle: bool, label: str) -> _Node:
    from cairn import _engine
    from cairn.manifest import STATE, TENSORS

    _engine._check_class(target, reader)
    reader.check_pickle(allow_pickle)
    node = _Node(target, reader, label)
    node.skeleton = reader.read(STATE)
    if TENSORS in reader.manifest.files:
        _stream_verify(node)
    comps = _engine.checkpointable_components(target, where=label or "<root>")
    for name in reader.manifest.components:
        comp = comps.get(name)
        if comp is not None:
            node.children[name] = _phase1(comp, reader.child(name), allow_pickle, f"{label}/{name}" if label else name)
    return node


def _phase2(node: _Node, allow_pickle: bool) -> Any:
    from cairn import _engine
    from cairn.codec.state import TORCH_TO_ST, decode_state, numpy_dtype_from_descr
    from cairn.codec.tensors import NUMPY_TO_ST
    from cairn.errors import CorruptCheckpointError
    from cairn.manifest import STATE, TENSORS

    reader = node.reader
    where = reader.where(STATE)
    tw = reader.where(TENSORS)
    get_buffers = getattr(node.target, "get_state_buffers", None)
    dest = _leaf_map(get_buffers()) if callable(get_buffers) and node.fd is not None else {}

    def load_array(name: str, kind: int, dtype: Any, shape: list[int]) -> Any:
        if node.fallback is not None:
            return node.fallback.get(name, kind, dtype, shape)
        if node.records is None:
            raise CorruptCheckpointError(f"{where} refers to the array {name!r} but the folder has no {TENSORS}.")
        rec = node.records.get(name)
        if rec is None:
            raise CorruptCheckpointError(f"{tw} has no tensor {name!r}, which the state refers to.")
        if not (isinstance(shape, list) and all(type(d) is int and d >= 0 for d in shape)):
            raise CorruptCheckpointError(f"{tw}: tensor {name!r} has an invalid shape {shape!r}.")
        count = int(np.prod(shape, dtype=np.int64)) if shape else 1
        if kind == 0:
            npd = numpy_dtype_from_descr(dtype, where=tw)
            itemsize, st = npd.itemsize, (NUMPY_TO_ST.get(npd.name) if npd.isnative else None)
        else:
            import torch

            td = getattr(torch, dtype, None) if isinstance(dtype, str) else None
            if not isinstance(td, torch.dtype):
                raise CorruptCheckpointError(f"{tw}: tensor {name!r} has unknown torch dtype {dtype!r}.")
            itemsize, st = td.itemsize, TORCH_TO_ST.get(dtype)
        if rec.end - rec.begin != count * itemsize or (
            st is not None and (rec.st_dtype != st or list(rec.shape) != list(shape))
        ):
            raise CorruptCheckpointError(f"{tw}: tensor {name!r} does not match its record in the state.")
        value = dest.get(name)
        view = _byte_view(value, kind, dtype, shape) if value is not None else None
        if view is None:
            value, view = _fresh(kind, dtype, shape)
        if view is not None:
            got, total = 0, len(view)
            while got < total:
                n = os.preadv(node.fd, [view[got:]], rec.begin + got)
                if n == 0:
                    raise CorruptCheckpointError(f"{tw} became shorter while it was read.")
                got += n
        return value

    state = decode_state(node.skeleton, load_array=load_array, allow_pickle=allow_pickle, where=where)
    if not isinstance(state, dict):
        raise CorruptCheckpointError(f"{where} does not hold a dict.")
    state = _engine.upgrade(
        type(node.target),
        state,
        reader.metadata["state_version"],
        f"{reader.where()} (component {node.label or '<root>'})",
    )
    children = {name: _phase2(c, allow_pickle) for name, c in node.children.items()}
    return _engine.LoadedFolder(state, children)


def _close(node: _Node) -> None:
    if node.fd is not None:
        os.close(node.fd)
        node.fd = None
    for c in node.children.values():
        _close(c)


def restore(obj: Any, path: Any, *, component: str | None, filesystem: Any, allow_pickle: bool) -> None:
    """Patched ``cairn._engine.restore``: verify everything (streaming), then read in place, then apply."""
    from cairn import _engine

    target = obj if not component else _engine.find_component(obj, component)
    reader = _engine.open_checkpoint(path, filesystem)
    label = component.strip("/") if component else ""
    node = _phase1(target, reader, allow_pickle, label)
    try:
        loaded = _phase2(node, allow_pickle)
    finally:
        _close(node)
    _engine.apply_loaded(target, loaded, label)


# --------------------------------------------------------------------------- P2: save


def _sync_file_range() -> Any:
    try:
        fn = ctypes.CDLL(None, use_errno=True).sync_file_range
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_longlong, ctypes.c_longlong, ctypes.c_uint]
    fn.restype = ctypes.c_int
    return fn


_SFR = _sync_file_range()
_SFR_WRITE = 2
WRITE_CHUNK = 32 << 20
WRITEBACK_EVERY = 64 << 20


def write_file(self: Any, path: str, chunks: Any) -> tuple[int, int]:
    """Patched ``LocalStorage.write_file``: CRC overlapped with writes, early write-back."""
    pool = _crc_pool()
    crc = [0]

    def crc_of(mv: memoryview) -> None:
        crc[0] = zlib.crc32(mv, crc[0])

    size = 0
    flushed = 0
    pending = None
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
    try:
        for chunk in chunks:
            whole = memoryview(chunk).cast("B")
            for i in range(0, max(len(whole), 1), WRITE_CHUNK):
                mv = whole[i : i + WRITE_CHUNK]
                if not len(mv):
                    continue
                if pending is not None:
                    pending.result()
                pending = pool.submit(crc_of, mv) if len(mv) >= (1 << 20) else None
                if pending is None:
                    crc_of(mv)
                rest = mv
                while rest:
                    n = os.write(fd, rest)
                    rest = rest[n:]
                size += len(mv)
                if _SFR is not None and size - flushed >= WRITEBACK_EVERY:
                    _SFR(fd, flushed, size - flushed, _SFR_WRITE)
                    flushed = size
        if pending is not None:
            pending.result()
        os.fsync(fd)
    finally:
        os.close(fd)
    return size, crc[0]


# --------------------------------------------------------------------------- P3: async snapshot


_SNAP: dict[tuple[Any, ...], list[Any]] = {}


def snapshot_state(state: Any) -> Any:
    """Patched ``manager.snapshot_state``: copy into buffers reused from the previous snapshot.

    (A real version keeps the pool on the manager and hands a buffer back when its write is done.)
    """
    t = type(state)
    if t is dict:
        return {k: snapshot_state(v) for k, v in state.items()}
    if t is list:
        return [snapshot_state(v) for v in state]
    if t is tuple:
        return tuple(snapshot_state(v) for v in state)
    if isinstance(state, np.ndarray):
        key = ("np", state.dtype.str, state.shape)
        pool = _SNAP.setdefault(key, [])
        out = pool.pop() if pool else np.empty_like(state)
        np.copyto(out, state)
        _IN_USE.append((key, out))
        return out
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(state, torch.Tensor):
        if state.device.type != "cpu" or state.layout != torch.strided:
            return state.detach().clone()
        key = ("torch", str(state.dtype), tuple(state.shape))
        pool = _SNAP.setdefault(key, [])
        out = pool.pop() if pool else torch.empty(state.shape, dtype=state.dtype)
        out.copy_(state.detach())
        _IN_USE.append((key, out))
        return out
    return state


_IN_USE: list[tuple[tuple[Any, ...], Any]] = []


def _release_snapshots() -> None:
    while _IN_USE:
        key, buf = _IN_USE.pop()
        _SNAP.setdefault(key, []).append(buf)


def apply(parts: str = "all") -> None:
    """Install the patches (``parts``: comma-separated among restore, save, async; or all)."""
    from cairn import _engine, manager
    from cairn.storage.local import LocalStorage

    # P3 (async) landed upstream in 7defa02 with another signature; it is only applied when named.
    want = {"restore", "save", "fsync"} if parts == "all" else set(parts.split(","))
    if "restore" in want:
        _engine.restore = restore
    if "save" in want:
        LocalStorage.write_file = write_file  # type: ignore[method-assign]
    if "async" in want:
        manager.snapshot_state = snapshot_state
        orig_write = manager.CheckpointManager._write

        def _write(self: Any, *a: Any, **k: Any) -> None:
            try:
                orig_write(self, *a, **k)
            finally:
                _release_snapshots()

        manager.CheckpointManager._write = _write  # type: ignore[method-assign]
    if "fsync" in want:
        apply_deferred_fsync()


# --------------------------------------------------------------------------- P4: one fsync pass per commit

_DEFERRED: list[str] = []


def apply_deferred_fsync() -> None:
    """Files are written without fsync; ``_commit`` fsyncs them all, then the folders, then renames.

    Same durability (every file is on disk before the rename that publishes it), but
    the journal commits once for the whole tree instead of once per file.
    """
    from cairn.storage.local import LocalStorage

    inner = LocalStorage.write_file
    real_fsync = os.fsync

    def write_file_deferred(self: Any, path: str, chunks: Any) -> tuple[int, int]:
        def no_fsync(fd: int) -> None:
            _DEFERRED.append(path)

        os.fsync = no_fsync  # type: ignore[assignment]
        try:
            return inner(self, path, chunks)
        finally:
            os.fsync = real_fsync

    orig_commit = LocalStorage._commit

    def _commit(self: Any, staging: str, final: str) -> None:
        pending = [p for p in _DEFERRED if p.startswith(staging)]

        def sync_one(p: str) -> None:
            fd = os.open(p, os.O_RDONLY)
            try:
                real_fsync(fd)
            finally:
                os.close(fd)

        # Concurrent fsyncs share journal commits (ext4 batches them into one transaction).
        with ThreadPoolExecutor(min(16, max(1, len(pending)))) as ex:
            list(ex.map(sync_one, pending))
        _DEFERRED[:] = [p for p in _DEFERRED if not p.startswith(staging)]
        orig_commit(self, staging, final)

    LocalStorage.write_file = write_file_deferred  # type: ignore[method-assign]
    LocalStorage._commit = _commit  # type: ignore[method-assign]

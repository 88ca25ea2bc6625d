"""A ring buffer of transitions whose checkpoints write only the chunks that changed.

Layout. A :class:`ReplayBuffer` holds one preallocated numpy array per column
(``capacity`` rows each) and cuts its rows into fixed-size chunks of
``chunk_rows`` rows (about 16 MB by default). Each chunk is a checkpoint component
of its own, :class:`ReplayBufferChunk`, whose arrays are views of the
buffer's columns, so each chunk is its own folder and its own tensor file::

    replay_buffer/
      metadata.json, state.msgpack ...     capacity, layout, size, cursor, counters, RNG
      chunk_00000.3f9a1c2e/tensors.safetensors   rows 0 .. chunk_rows-1 of every column
      chunk_00001.3f9a1c2e/...

Only chunks that hold rows are saved. A manager save compares each file with
the previous step's (size and SHA-256) and links the unchanged ones, so after
``add`` a save writes the chunks the new rows landed in (also those a full ring
overwrote) and links the rest; every step folder stays complete.

A chunk folder's name ends in a hash of the buffer's layout (capacity, chunk
rows, columns with shapes and dtypes). A checkpoint of a buffer with another
layout has no folder this buffer recognises: none of its chunks is read, and the
buffer's own state check refuses it with an error naming what differs, before
anything is applied.

Restore. Each chunk offers its live views (``get_state_buffers``), so a restore
from local disk reads every chunk straight into the buffer's arrays, after every
file of the restore passed its checksum and after the buffer and every chunk
accepted their states (``check_state``): a crafted checkpoint whose checksums
pass but whose chunk list, sizes or dtypes do not fit is refused before any
row of the live arrays changes.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any, ClassVar

import numpy as np

from cairn import Checkpointable, CorruptCheckpointError, IncompatibleCheckpointError
from cairn._ctor_bounds import FolderSizes, alloc_limit
from cairn.rl.utils._util import Names
from cairn.state_checks import Schema, count

__all__ = ["DEFAULT_CHUNK_BYTES", "ColumnSpecs", "ReplayBuffer", "ReplayBufferChunk"]

DEFAULT_CHUNK_BYTES = 16 << 20
"""The size a chunk aims at when ``chunk_rows`` is not given. Each chunk is a folder
of five files, and a cold restore pays a few disk seeks per file (inodes, folders):
at 4 MB chunks those seeks made a 1.2 GB restore 3x slower than a raw read, at 16 MB
they are noise. A save rewrites whole chunks, so a save after ``n`` new rows writes
at most ``n`` rows plus two chunks (measured: ``python -m bench --only replay``)."""

ColumnSpecs = Mapping[str, tuple[Sequence[int], Any]]
"""Column name -> (shape of one row, dtype), e.g. ``{"obs": ((84, 84), "uint8")}``."""

_Layout = dict[str, tuple[tuple[int, ...], str]]


def _normalize_columns(columns: ColumnSpecs) -> _Layout:
    """Columns with tuple shapes and canonical dtype names; ``ValueError`` for a bad one."""
    if not isinstance(columns, Mapping) or not columns:
        raise ValueError("columns must be a non-empty mapping of name -> (shape, dtype).")
    out: _Layout = {}
    for name, spec in columns.items():
        if not isinstance(name, str) or not name:
            raise ValueError(f"Column names must be non-empty strings, got {name!r}.")
        try:
            shape_in, dtype_in = spec
            shape = tuple(int(d) for d in shape_in)
            dtype = np.dtype(dtype_in)
        except (TypeError, ValueError) as err:
            raise ValueError(
                f"Column {name!r}: expected (shape, dtype) such as ((84, 84), 'uint8'), got {spec!r} ({err})."
            ) from err
        if any(d < 0 for d in shape):
            raise ValueError(f"Column {name!r}: shape {shape} has a negative dimension.")
        if dtype.hasobject or dtype.fields is not None or dtype.kind == "V":
            raise ValueError(f"Column {name!r}: dtype {dtype} is not a plain numeric or bool dtype.")
        out[name] = (shape, dtype.name)
    return out


CHUNK_OBJECT_BYTES = 800
"""Memory of one chunk object with its views (3,000,000 of them took 2.4 GB)."""


def chunks_problem(
    args: tuple[Any, ...], kwargs: Mapping[str, Any], folder: FolderSizes, *, buffers: int
) -> str | None:
    """Why ``buffers`` buffers of the recorded capacity and chunk_rows make more chunks than ``folder`` allows."""
    capacity = args[0] if args else kwargs.get("capacity")
    chunk_rows = kwargs.get("chunk_rows")
    if type(capacity) is not int or type(chunk_rows) is not int or capacity < 1 or chunk_rows < 1:
        return None  # the default chunk size (about 16 MB of rows), or values the constructor refuses
    chunks = buffers * -(-capacity // chunk_rows)
    need = chunks * CHUNK_OBJECT_BYTES
    if need > alloc_limit(folder.tree_bytes):
        return (
            f"capacity={capacity} in chunks of chunk_rows={chunk_rows} make {chunks} chunk objects (about {need} "
            f"bytes), and the buffer's folder holds {folder.tree_bytes} bytes"
        )
    return None


def _layout_tag(capacity: int, chunk_rows: int, columns: _Layout) -> str:
    """Eight hex digits naming the layout; part of every chunk folder's name."""
    desc = json.dumps(
        [capacity, chunk_rows, sorted((n, list(s), d) for n, (s, d) in columns.items())], separators=(",", ":")
    )
    return hashlib.sha256(desc.encode()).hexdigest()[:8]


def _row_bytes(columns: _Layout) -> int:
    return sum(math.prod(shape) * np.dtype(dtype).itemsize for shape, dtype in columns.values())


class ReplayBufferChunk(Checkpointable):
    """Rows ``start .. start + rows - 1`` of every column of a :class:`ReplayBuffer`.

    Inside a buffer its arrays are views of the buffer's columns (no copy);
    built alone (``ReplayBufferChunk.from_checkpoint`` on a chunk folder) it owns
    arrays of its own. Its state: ``{"index", "start", "columns": {name: array}}``.

    Args:
        index: The chunk's number in its buffer.
        start: The buffer row of the chunk's first row.
        rows: How many rows the chunk holds.
        columns: Column name -> (row shape, dtype name).
    """

    def __init__(self, index: int, start: int, rows: int, columns: ColumnSpecs) -> None:
        self.index = int(index)
        self.start = int(start)
        self.rows = int(rows)
        self.layout = _normalize_columns(columns)
        self.arrays: dict[str, np.ndarray] = {
            name: np.zeros((self.rows, *shape), dtype=dtype) for name, (shape, dtype) in self.layout.items()
        }
        self._on_loaded: Callable[[int], None] | None = None

    @classmethod
    def _of(
        cls,
        index: int,
        start: int,
        columns: _Layout,
        arrays: dict[str, np.ndarray],
        on_loaded: Callable[[int], None],
    ) -> ReplayBufferChunk:
        """A chunk whose arrays are the given views (the buffer's rows), allocating nothing.

        ``on_loaded(index)`` runs after each successful ``set_state``: the buffer learns which
        chunks a restore brought before its own ``set_state`` runs.
        """
        chunk = cls.__new__(cls)
        chunk.index, chunk.start = index, start
        chunk.rows = len(next(iter(arrays.values())))
        chunk.layout = columns
        chunk.arrays = arrays
        chunk._on_loaded = on_loaded
        return chunk

    def get_state(self, components: Names = None, *, not_components: Names = None, **kwargs: Any) -> dict[str, Any]:
        """The chunk's rows, as views of its arrays (copy them before changing the buffer)."""
        return {"index": self.index, "start": self.start, "columns": dict(self.arrays)}

    def get_state_buffers(self) -> dict[str, Any]:
        """The live arrays, so that a restore reads each column straight into its rows."""
        return {"columns": dict(self.arrays)}

    def check_state(self, state: dict[str, Any], components: Collection[str]) -> None:
        """Check every column against the layout (before a restore reads any chunk into place).

        Raises:
            IncompatibleCheckpointError: A column is missing, extra, or of another shape or dtype.
            CorruptCheckpointError: The state is not a chunk's state, or of another chunk.
        """
        # A method, not a Schema: every column is checked against this chunk's live layout and rows.
        where = f"replay buffer chunk {self.index} (rows {self.start}..{self.start + self.rows - 1})"
        if not isinstance(state, dict) or not isinstance(state.get("columns"), dict):
            raise CorruptCheckpointError(f"The state of {where} has no 'columns' dict; the checkpoint is damaged.")
        if state.get("index") != self.index or state.get("start") != self.start:
            raise CorruptCheckpointError(
                f"The state restored into {where} is that of chunk {state.get('index')!r} starting at row "
                f"{state.get('start')!r}; the chunk folders were renamed or the checkpoint was tampered with."
            )
        cols = state["columns"]
        missing, extra = sorted(set(self.layout) - set(cols)), sorted(set(cols) - set(self.layout))
        if missing or extra:
            raise IncompatibleCheckpointError(
                f"The checkpoint of {where} has columns {sorted(cols)}, but this buffer has {sorted(self.layout)} "
                f"(missing {missing}, unexpected {extra}). Restore it into a buffer built with the same columns."
            )
        for name, value in cols.items():
            shape, dtype = self.layout[name]
            want = (self.rows, *shape)
            if not isinstance(value, np.ndarray) or value.shape != want or value.dtype != np.dtype(dtype):
                got = f"{value.dtype} {value.shape}" if isinstance(value, np.ndarray) else type(value).__name__
                raise IncompatibleCheckpointError(
                    f"Column {name!r} of {where} holds {got} in the checkpoint, but this buffer expects "
                    f"{dtype} {want}. Restore it into a buffer built with the same columns and chunk size."
                )

    def set_state(self, state: dict[str, Any]) -> None:
        """Copy the state's rows into the arrays, after :meth:`check_state`.

        Raises:
            IncompatibleCheckpointError: A column is missing, extra, or of another shape or dtype.
            CorruptCheckpointError: The state is not a chunk's state, or of another chunk.
        """
        self.check_state(state, ())
        cols = state["columns"]
        for name, value in cols.items():
            if value is not self.arrays[name]:  # read into a fresh array: copy it in
                np.copyto(self.arrays[name], value)
        if self._on_loaded is not None:
            self._on_loaded(self.index)

    @classmethod
    def ctor_args_problem(cls, args: tuple[Any, ...], kwargs: dict[str, Any], folder: FolderSizes) -> str | None:
        """The hook of :mod:`cairn._ctor_bounds`: a standalone chunk allocates ``rows`` rows of every column,
        which its folder (its tensors file) holds."""
        rows = args[2] if len(args) > 2 else kwargs.get("rows")
        columns = args[3] if len(args) > 3 else kwargs.get("columns")
        if type(rows) is not int or not isinstance(columns, Mapping):
            return None  # the constructor refuses them
        need = rows * _row_bytes(dict(columns))
        if need > alloc_limit(folder.tree_bytes):
            return f"a chunk of {rows} rows takes {need} bytes, and its folder holds {folder.tree_bytes} bytes"
        return None

    def get_ctor_args_and_kwargs(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """``(index, start, rows, columns)``: a standalone chunk with arrays of its own."""
        return (self.index, self.start, self.rows, dict(self.layout)), {}


class ReplayBuffer(Checkpointable):
    """A ring buffer of transitions, uniform sampling with a seeded RNG, incremental checkpoints.

    Columns are declared up front (name -> row shape, dtype) and preallocated
    for ``capacity`` rows; :meth:`add` writes many rows at once at the cursor,
    overwriting the oldest once full. :meth:`sample` draws rows uniformly (with
    replacement) with the buffer's own ``numpy.random.Generator``, whose state is
    in the checkpoint, as are the cursor, the size and the lifetime counters: a
    restored buffer samples and adds exactly as the original would have.

    The buffer stores what it is given: for image observations, a ``next_obs``
    column doubles the memory; an index scheme (next observation = the next row
    of the same episode) is for the algorithm to build on top of it.

    Checkpoints: see the module docs. ``get_state`` returns views of the live
    arrays, not copies (a copy of gigabytes per save would defeat the purpose);
    an async :class:`cairn.CheckpointManager` snapshots them, a synchronous save
    writes them before returning.

    Args:
        capacity: Rows (transitions) the buffer holds.
        columns: Column name -> (row shape, dtype), e.g.
            ``{"obs": ((84, 84), "uint8"), "actions": ((), "int64")}``.
        chunk_rows: Rows per chunk (one checkpoint folder each). Default: the
            power of two nearest below :data:`DEFAULT_CHUNK_BYTES` per chunk, at
            most ``capacity``.
        seed: Seed of the sampling RNG.

    Example::

        buf = ReplayBuffer(100_000, {"obs": ((4,), "float32"), "actions": ((), "int64")}, seed=0)
        buf.add({"obs": obs_batch, "actions": action_batch})
        batch = buf.sample(256)
        mgr.save(buf, step)          # writes the chunks the new rows changed, links the rest
    """

    STATE_VERSION = 1

    def __init__(self, capacity: int, columns: ColumnSpecs, *, chunk_rows: int | None = None, seed: int = 0) -> None:
        if type(capacity) is not int or capacity < 1:
            raise ValueError(f"capacity must be an int >= 1, got {capacity!r}.")
        self.capacity = capacity
        self.layout = _normalize_columns(columns)
        if chunk_rows is None:
            per_row = max(1, _row_bytes(self.layout))
            chunk_rows = min(capacity, 1 << max(0, (DEFAULT_CHUNK_BYTES // per_row).bit_length() - 1))
        if type(chunk_rows) is not int or not 1 <= chunk_rows <= capacity:
            raise ValueError(f"chunk_rows must be an int in 1..capacity ({capacity}), got {chunk_rows!r}.")
        self.chunk_rows = chunk_rows
        self.seed = int(seed)
        self.rng = np.random.Generator(np.random.PCG64(self.seed))
        # np.zeros maps untouched pages lazily: an empty buffer costs no memory yet.
        self.columns: dict[str, np.ndarray] = {
            name: np.zeros((capacity, *shape), dtype=dtype) for name, (shape, dtype) in self.layout.items()
        }
        self.size = 0  # rows holding data
        self.cursor = 0  # the row the next add writes first
        self.added_lifetime = 0
        self.sampled_lifetime = 0
        tag = _layout_tag(capacity, chunk_rows, self.layout)
        self._chunks: list[tuple[str, ReplayBufferChunk]] = []
        for k, start in enumerate(range(0, capacity, chunk_rows)):
            views = {name: col[start : start + chunk_rows] for name, col in self.columns.items()}
            chunk = ReplayBufferChunk._of(k, start, self.layout, views, self._loaded_add)
            self._chunks.append((f"chunk_{k:05d}.{tag}", chunk))
        # Chunks restored since the restore began: the buffer checks it got every one its size needs.
        self._loaded: set[int] = set()

    def _loaded_add(self, index: int) -> None:
        self._loaded.add(index)

    # ------------------------------------------------------------------ the buffer

    def __len__(self) -> int:
        """The number of rows holding data (at most ``capacity``)."""
        return self.size

    @property
    def nbytes(self) -> int:
        """Bytes of the column arrays (all ``capacity`` rows)."""
        return sum(col.nbytes for col in self.columns.values())

    def add(self, batch: Mapping[str, Any]) -> None:
        """Append rows, one per item of each column's leading axis, overwriting the oldest when full.

        Args:
            batch: Column name -> array of shape ``(n, *row_shape)``, for every column.
                Values are cast to the column's dtype if numpy can do so safely
                within the same kind (float64 -> float32, not float -> int).

        Raises:
            ValueError: A column missing or unknown, rows of another shape, or
                columns of different lengths.
        """
        missing, extra = sorted(set(self.layout) - set(batch)), sorted(set(batch) - set(self.layout))
        if missing or extra:
            raise ValueError(f"ReplayBuffer.add: missing columns {missing}, unknown columns {extra}.")
        arrays: dict[str, np.ndarray] = {}
        n = -1
        for name, value in batch.items():
            arr = np.asarray(value)
            shape, _ = self.layout[name]
            if arr.ndim != len(shape) + 1 or arr.shape[1:] != shape:
                raise ValueError(f"ReplayBuffer.add: column {name!r} has shape {arr.shape}; expected (n, *{shape}).")
            if n >= 0 and arr.shape[0] != n:
                raise ValueError(f"ReplayBuffer.add: columns have different lengths ({n} and {arr.shape[0]}).")
            n = arr.shape[0]
            arrays[name] = arr
        if n <= 0:
            return
        keep = min(n, self.capacity)  # of a batch larger than the buffer, only the newest rows stay
        start = (self.cursor + n - keep) % self.capacity
        first = min(keep, self.capacity - start)
        for name, arr in arrays.items():
            col, src = self.columns[name], arr[n - keep :]
            try:
                np.copyto(col[start : start + first], src[:first], casting="same_kind")
                np.copyto(col[: keep - first], src[first:], casting="same_kind")
            except TypeError as err:
                raise ValueError(f"ReplayBuffer.add: column {name!r}: {err}") from err
        self.cursor = (self.cursor + n) % self.capacity
        self.size = min(self.capacity, self.size + n)
        self.added_lifetime += n

    def sample(self, num_items: int) -> dict[str, np.ndarray]:
        """Draw ``num_items`` rows uniformly with replacement; a dict of fresh arrays per column.

        Raises:
            ValueError: The buffer is empty, or ``num_items`` is negative.
        """
        self._check_draw(num_items)
        idx = self.rng.integers(0, self.size, size=num_items)
        self.sampled_lifetime += num_items
        return {name: col[idx] for name, col in self.columns.items()}

    def _check_draw(self, num_items: int) -> None:
        """Refuse (``ValueError``) a draw from an empty buffer, or of a negative number of rows."""
        if self.size == 0:
            raise ValueError(f"{type(self).__name__}.sample: the buffer is empty; add rows first.")
        if num_items < 0:
            raise ValueError(f"{type(self).__name__}.sample: num_items must be >= 0, got {num_items}.")

    # ------------------------------------------------------------------ checkpoints

    def _needed(self) -> int:
        """How many chunks hold rows (the first ones: the ring fills from row 0)."""
        return -(-self.size // self.chunk_rows)

    def get_checkpointable_components(self) -> list[tuple[str, Checkpointable]]:
        """Every chunk, named ``chunk_<k>.<layout hash>``; only those holding rows are saved."""
        # A restore asks for the components right before it applies them (bottom-up, then this
        # buffer's set_state): forget which chunks an earlier, failed restore brought.
        self._loaded = set()
        return list(self._chunks)

    def get_state(self, components: Names = None, *, not_components: Names = None, **kwargs: Any) -> dict[str, Any]:
        """Layout, size, cursor, counters, RNG state, and the chunks holding rows (as views)."""
        needed = self._chunks[: self._needed()]
        state: dict[str, Any] = {
            "capacity": self.capacity,
            "chunk_rows": self.chunk_rows,
            "columns": {name: {"shape": list(shape), "dtype": dtype} for name, (shape, dtype) in self.layout.items()},
            "size": self.size,
            "cursor": self.cursor,
            "added_lifetime": self.added_lifetime,
            "sampled_lifetime": self.sampled_lifetime,
            "rng": self.rng.bit_generator.state,
            "chunks": [name for name, _ in needed],
        }
        for name, chunk in needed:
            if self._check_component(name, components, not_components):
                state[name] = chunk.get_state()
        return state

    def set_state(self, state: dict[str, Any]) -> None:
        """Apply a state: check it, apply the chunks it holds, check every needed chunk came, then the rest.

        The layout must be this buffer's, and every chunk the state's size needs
        must come with it: in ``state`` itself, or restored just before by the
        engine (a restore applies components first, bottom-up).

        Raises:
            IncompatibleCheckpointError: Another capacity, chunk size or columns.
            CorruptCheckpointError: Size, cursor, counters or chunk list that do not fit
                together, or a chunk the size needs that was not restored.
        """
        loaded, self._loaded = self._loaded, set()
        try:
            self._apply(state, loaded)
        finally:
            self._loaded = set()

    def check_state(self, state: dict[str, Any], components: Collection[str]) -> None:
        """Refuse, before a restore reads any chunk into the live arrays, what :meth:`set_state` refuses.

        ``components``: the chunk folders the restore brings. The layout must be this
        buffer's, the numbers must hold together, and every chunk the size needs must come.

        Raises:
            IncompatibleCheckpointError: Another capacity, chunk size or columns, or an RNG state
                that is not PCG64's.
            CorruptCheckpointError: Size, cursor, counters or chunk list that do not fit together,
                or a chunk the size needs that is not in the checkpoint.
        """
        # state_schema holds the counts; the rest is cross-field (the layout against this buffer's,
        # the size against the chunks the restore brings), so a method.
        brought = set(components)
        self._check_and_build(state, {chunk.index for name, chunk in self._chunks if name in brought})

    def _check_and_build(self, state: dict[str, Any], loaded: set[int]) -> tuple[dict[str, int], np.random.Generator]:
        """Check ``state`` given the chunks restored with it; its counts and its sampling RNG."""
        counts = self._check_own_state(state)
        size = counts["size"]
        rng = np.random.Generator(np.random.PCG64())
        try:
            rng.bit_generator.state = state["rng"]
        except (TypeError, ValueError, KeyError) as err:
            raise IncompatibleCheckpointError(
                f"The replay buffer checkpoint's sampling RNG state does not fit a PCG64 generator: {err}."
            ) from err
        needed = -(-size // self.chunk_rows)
        missing = [name for name, chunk in self._chunks[:needed] if chunk.index not in loaded and name not in state]
        if missing:
            raise CorruptCheckpointError(
                f"The replay buffer checkpoint holds {size} rows, which need chunks {self._chunks[0][0]} .. "
                f"{self._chunks[needed - 1][0]}, but {len(missing)} of them are not in it ({', '.join(missing[:3])}"
                f"{' ...' if len(missing) > 3 else ''}). The checkpoint is incomplete or was tampered with; "
                "restore the buffer from another checkpoint."
            )
        return counts, rng

    def _apply(self, state: dict[str, Any], loaded: set[int]) -> None:
        counts, rng = self._check_and_build(state, loaded)
        for name, chunk in self._chunks:
            if name in state:
                chunk.set_state(state[name])
        self.rng = rng
        self.size, self.cursor = counts["size"], counts["cursor"]
        self.added_lifetime, self.sampled_lifetime = counts["added_lifetime"], counts["sampled_lifetime"]

    state_schema: ClassVar[Schema] = Schema(
        dict.fromkeys(("size", "cursor", "added_lifetime", "sampled_lifetime"), count), required=True
    )
    """The counts of the own state, each there. The rest is checked against this buffer (its layout,
    the chunks the size needs) by :meth:`check_state`."""

    def _check_own_state(self, state: dict[str, Any]) -> dict[str, int]:
        """Refuse a state of another layout, or whose numbers do not fit together; return its counts."""
        if state.get("capacity") != self.capacity or state.get("chunk_rows") != self.chunk_rows:
            raise IncompatibleCheckpointError(
                f"The replay buffer checkpoint has capacity {state.get('capacity')!r} in chunks of "
                f"{state.get('chunk_rows')!r} rows, but this buffer has capacity {self.capacity} in chunks of "
                f"{self.chunk_rows}. Build the buffer with the checkpoint's capacity and chunk_rows "
                "(ReplayBuffer.from_checkpoint does)."
            )
        layout = state.get("columns")
        if not isinstance(layout, dict):
            raise CorruptCheckpointError("The replay buffer checkpoint has no 'columns' layout; it is damaged.")
        for name in sorted(set(layout) | set(self.layout)):
            ours, spec = self.layout.get(name), layout.get(name)
            theirs = (tuple(spec.get("shape", ())), spec.get("dtype")) if isinstance(spec, dict) else None
            if ours != theirs:
                raise IncompatibleCheckpointError(
                    f"Column {name!r} of the replay buffer checkpoint is "
                    f"{'absent' if theirs is None else f'{theirs[1]} {theirs[0]}'}, but this buffer's is "
                    f"{'absent' if ours is None else f'{ours[1]} {ours[0]}'}. Build the buffer with the "
                    "checkpoint's columns (ReplayBuffer.from_checkpoint does)."
                )
        counts = self.state_schema.read(state, where="")
        size, cursor, added = counts["size"], counts["cursor"], counts["added_lifetime"]
        needed = [name for name, _ in self._chunks[: -(-size // self.chunk_rows)]] if size <= self.capacity else []
        problem = ""
        if size > self.capacity or cursor >= self.capacity:
            problem = f"size {size} and cursor {cursor} do not fit capacity {self.capacity}"
        elif size < self.capacity and cursor != size:
            problem = f"a ring that is not full ({size} rows) has its cursor at {size}, not {cursor}"
        elif added < size:
            problem = f"added_lifetime {added} is less than size {size}"
        elif state.get("chunks") != needed:
            listed = state.get("chunks")
            count = len(listed) if isinstance(listed, list) else repr(listed)
            problem = f"its chunk list ({count} entries) is not the {len(needed)} chunks that {size} rows fill"
        if problem:
            raise CorruptCheckpointError(
                f"The replay buffer checkpoint's own state does not hold together: {problem}. It was damaged or "
                "tampered with; restore the buffer from another checkpoint."
            )
        return counts

    @classmethod
    def ctor_args_problem(cls, args: tuple[Any, ...], kwargs: dict[str, Any], folder: FolderSizes) -> str | None:
        """The hook of :mod:`cairn._ctor_bounds`: the chunk objects the constructor makes are bounded.

        A buffer builds ``capacity / chunk_rows`` chunk objects (about
        :data:`CHUNK_OBJECT_BYTES` each) whether or not they hold rows, and saves
        only the chunks holding rows, so their number is bounded by what the folder
        holds plus the constant of :func:`cairn._ctor_bounds.alloc_limit` (about
        80,000 empty chunks). The column arrays are zero pages until rows are written.
        """
        return chunks_problem(args, kwargs, folder, buffers=1)

    def get_ctor_args_and_kwargs(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """``(capacity, columns)`` with ``chunk_rows`` and ``seed``."""
        return (self.capacity, dict(self.layout)), {"chunk_rows": self.chunk_rows, "seed": self.seed}

    def get_metadata(self) -> dict[str, Any]:
        """Capacity, size and bytes, for ``cairn inspect``."""
        return {"replay_buffer": {"capacity": self.capacity, "size": self.size, "nbytes": self.nbytes}}

"""State trees <-> (a msgpack skeleton, a list of arrays for a safetensors file).

The skeleton holds every non-array value; each array is replaced by a
reference (an msgpack extension) to a tensor of the safetensors file. Types
that msgpack would blur are kept apart with extensions: tuples stay tuples,
numpy scalars keep their dtype, torch tensors come back as torch tensors.

Extension codes (payloads are msgpack unless said otherwise):
    1 ARRAY     [name, kind, dtype, shape]  kind 0 numpy, 1 torch
    2 TUPLE     the items as an msgpack array
    3 BIGINT    the decimal digits of an int outside 64 bits (UTF-8)
    4 CUSTOM    [registered type name, encoded value]
    5 PICKLE    pickle bytes (only with allow_pickle=True)
    6 NPSCALAR  [numpy dtype descr, raw bytes]
"""

from __future__ import annotations

import pickle
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import msgpack
import numpy as np

from cairn._limits import DECODE_BYTES_CONSTANT, DECODE_BYTES_PER_BYTE, decode_limit
from cairn.codec.tensors import NUMPY_TO_ST, TensorEntry
from cairn.errors import CheckpointError, CorruptCheckpointError, IncompatibleCheckpointError, UnsafeCheckpointError
from cairn.registry import registered_by_name, registered_for_value

EXT_ARRAY, EXT_TUPLE, EXT_BIGINT, EXT_CUSTOM, EXT_PICKLE, EXT_NPSCALAR = 1, 2, 3, 4, 5, 6
KIND_NUMPY, KIND_TORCH = 0, 1
MAX_DEPTH = 200  # nesting bound on save and load; RL states nest a handful of levels
MAX_EXT_DEPTH = 32  # nested extension records (tuples, custom values): each costs ~40 KB of C stack on load

_INT64_MIN, _UINT64_MAX = -(2**63), 2**64 - 1

# torch dtype name -> safetensors dtype; others are stored as raw U8 bytes.
TORCH_TO_ST: dict[str, str] = {
    "bool": "BOOL", "uint8": "U8", "int8": "I8", "int16": "I16", "uint16": "U16",
    "float16": "F16", "bfloat16": "BF16", "int32": "I32", "uint32": "U32",
    "float32": "F32", "int64": "I64", "uint64": "U64", "float64": "F64",
    "float8_e5m2": "F8_E5M2", "float8_e4m3fn": "F8_E4M3",
}  # fmt: skip


# torch dtypes whose tensors ``.numpy()`` views as the same bytes (bfloat16, float8 and the
# wide unsigned ints go through torch's own uint8 view).
_NUMPY_VIEWABLE = frozenset(
    {"bool", "uint8", "int8", "int16", "int32", "int64", "float16", "float32", "float64", "complex64", "complex128"}
)


def _path_str(path: tuple[Any, ...]) -> str:
    return "/".join(str(p) for p in path) if path else "<root>"


def unsupported_value_error(value: Any, path: tuple[Any, ...], what: str = "state") -> CheckpointError:
    """The error for a value the default format cannot hold, with both ways out."""
    return CheckpointError(
        f"Cannot save the value at {what} path {_path_str(path)!r}: values of type "
        f"{type(value).__module__}.{type(value).__qualname__} are not supported by cairn's "
        "pickle-free format. Either register an encoder with "
        "cairn.register_type(cls, encode=..., decode=...) (or decorate a dataclass with "
        "@cairn.register_type), or pass allow_pickle=True to save it with pickle "
        "(loading it then also needs allow_pickle=True)."
    )


def numpy_descr(dtype: np.dtype[Any]) -> Any:
    """A msgpack/JSON-able description of a numpy dtype (safe to rebuild, no code)."""
    return np.lib.format.dtype_to_descr(dtype)


def numpy_dtype_from_descr(descr: Any, *, where: str) -> np.dtype[Any]:
    """Rebuild a numpy dtype from :func:`numpy_descr`'s output, refusing object dtypes."""
    try:
        if isinstance(descr, list):
            descr = [tuple(d) for d in descr]
        dtype = np.lib.format.descr_to_dtype(descr)
    except Exception as err:  # numpy raises many types (TypeError, ValueError, OverflowError, ...)
        raise CorruptCheckpointError(f"{where}: invalid numpy dtype description {descr!r}.") from err
    if dtype.hasobject:
        raise CorruptCheckpointError(f"{where}: object dtypes are never loaded without pickle.")
    return dtype


@dataclass
class EncodedState:
    """The result of encoding one component's own state."""

    skeleton: bytes
    tensors: list[TensorEntry]
    used_pickle: bool = False
    num_array_bytes: int = 0


@dataclass
class _Encoder:
    allow_pickle: bool
    tensors: list[TensorEntry] = field(default_factory=list)
    names: set[str] = field(default_factory=set)
    by_id: dict[int, tuple[str, Any]] = field(default_factory=dict)
    used_pickle: bool = False
    ext_depth: int = 0
    # Keep encoded arrays alive so that id() based de-duplication stays valid.
    keepalive: list[Any] = field(default_factory=list)

    def _enter_ext(self, path: tuple[Any, ...]) -> None:
        # Each nested extension costs C stack when loading; a state that saves must load.
        self.ext_depth += 1
        if self.ext_depth > MAX_EXT_DEPTH:
            self.ext_depth -= 1
            raise CheckpointError(
                f"The state at {_path_str(path)!r} nests more than {MAX_EXT_DEPTH} tuples or registered "
                "values inside each other; use lists for deep nesting."
            )

    def _name_for(self, path: tuple[Any, ...]) -> str:
        base = "/".join(str(p) for p in path) or "value"
        name, i = base, 1
        while name in self.names:
            name = f"{base}#{i}"
            i += 1
        self.names.add(name)
        return name

    def encode(self, value: Any, path: tuple[Any, ...]) -> Any:
        if len(path) > MAX_DEPTH:
            raise CheckpointError(
                f"The state at {_path_str(path[:8])}/... nests deeper than {MAX_DEPTH} levels; "
                "flatten it before saving."
            )
        t = type(value)
        if value is None or t is bool or t is str or t is bytes or t is float:
            return value
        if t is int:
            if _INT64_MIN <= value <= _UINT64_MAX:
                return value
            return msgpack.ExtType(EXT_BIGINT, str(value).encode("ascii"))
        if t is dict:
            out: dict[Any, Any] = {}
            for k, v in value.items():
                if not (k is None or type(k) is str or type(k) is int):
                    raise CheckpointError(
                        f"Cannot save the dict key {k!r} ({type(k).__name__}) at state path "
                        f"{_path_str(path)!r}: keys must be str, int or None."
                    )
                if type(k) is int and not (_INT64_MIN <= k <= _UINT64_MAX):
                    raise CheckpointError(
                        f"Cannot save the dict key {k} at state path {_path_str(path)!r}: "
                        "integer keys must fit in 64 bits."
                    )
                out[k] = self.encode(v, (*path, k))
            return out
        if t is list:
            return [self.encode(v, (*path, i)) for i, v in enumerate(value)]
        if t is tuple:
            self._enter_ext(path)
            try:
                items = [self.encode(v, (*path, i)) for i, v in enumerate(value)]
            finally:
                self.ext_depth -= 1
            return msgpack.ExtType(EXT_TUPLE, _pack(items))
        if isinstance(value, np.ndarray):
            return self._array(value, path)
        if isinstance(value, np.generic):
            if value.dtype.hasobject:
                raise unsupported_value_error(value, path)
            arr = np.asarray(value)
            return msgpack.ExtType(EXT_NPSCALAR, _pack([numpy_descr(arr.dtype), arr.tobytes()]))
        torch = sys.modules.get("torch")
        if torch is not None and isinstance(value, torch.Tensor):
            return self._tensor(value, path, torch)
        reg = registered_for_value(value)
        if reg is not None:
            try:
                plain = reg.encode(value)
            except Exception as err:
                raise CheckpointError(
                    f"The encoder registered for {reg.name} failed on the value at state path "
                    f"{_path_str(path)!r}: {err}"
                ) from err
            self._enter_ext(path)
            try:
                inner = self.encode(plain, (*path, "<" + reg.name + ">"))
            finally:
                self.ext_depth -= 1
            return msgpack.ExtType(EXT_CUSTOM, _pack([reg.name, inner]))
        if self.allow_pickle:
            try:
                payload = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
            except Exception as err:
                raise CheckpointError(f"Cannot pickle the value at state path {_path_str(path)!r}: {err}") from err
            self.used_pickle = True
            return msgpack.ExtType(EXT_PICKLE, payload)
        raise unsupported_value_error(value, path)

    def _remember(self, obj: Any, ref: Any) -> Any:
        self.by_id[id(obj)] = (ref, obj)
        self.keepalive.append(obj)
        return ref

    def _array(self, arr: np.ndarray, path: tuple[Any, ...]) -> Any:
        seen = self.by_id.get(id(arr))
        if seen is not None and seen[1] is arr:
            return seen[0]
        if arr.dtype.hasobject:
            if self.allow_pickle:
                self.used_pickle = True
                return msgpack.ExtType(EXT_PICKLE, pickle.dumps(arr, protocol=pickle.HIGHEST_PROTOCOL))
            raise unsupported_value_error(arr, path)
        name = self._name_for(path)
        flat = arr if arr.flags.c_contiguous else arr.copy(order="C")
        st = NUMPY_TO_ST.get(flat.dtype.name) if flat.dtype.isnative else None
        u8 = flat.reshape(-1).view(np.uint8) if flat.size else np.empty(0, np.uint8)
        align = min(int(flat.dtype.alignment), 8)
        if st is None:
            entry = TensorEntry(name, "U8", (int(u8.size),), u8, align)
        else:
            entry = TensorEntry(name, st, tuple(int(d) for d in flat.shape), u8, align)
        self.tensors.append(entry)
        ref = msgpack.ExtType(EXT_ARRAY, _pack([name, KIND_NUMPY, numpy_descr(arr.dtype), list(arr.shape)]))
        return self._remember(arr, ref)

    def _tensor(self, t: Any, path: tuple[Any, ...], torch: Any) -> Any:
        seen = self.by_id.get(id(t))
        if seen is not None and seen[1] is t:
            return seen[0]
        if t.layout != torch.strided or t.is_quantized or t.is_nested:
            if self.allow_pickle:
                self.used_pickle = True
                return msgpack.ExtType(EXT_PICKLE, pickle.dumps(t.detach().cpu()))
            raise unsupported_value_error(t, path)
        name = self._name_for(path)
        dtype_name = str(t.dtype).removeprefix("torch.")
        # Each torch call costs microseconds and an RL state is dozens of small tensors: detach
        # only what autograd tracks (only the bytes are read), and view the bytes through numpy
        # where numpy has the dtype.
        c = t.detach() if t.requires_grad else t
        if c.device.type != "cpu":
            c = c.cpu()
        if not c.is_contiguous():
            c = c.contiguous()
        if c.is_conj():
            c = c.resolve_conj()
        if c.is_neg():
            c = c.resolve_neg()
        nbytes = int(c.nbytes)
        if not nbytes:
            u8 = np.empty(0, np.uint8)
        elif dtype_name in _NUMPY_VIEWABLE:
            u8 = c.numpy().reshape(-1).view(np.uint8)
        else:
            u8 = c.reshape(-1).view(torch.uint8).numpy()
        st = TORCH_TO_ST.get(dtype_name)
        align = min(int(c.element_size()), 8)
        if st is None:
            entry = TensorEntry(name, "U8", (nbytes,), u8, align)
        else:
            entry = TensorEntry(name, st, tuple(c.shape), u8, align)
        self.tensors.append(entry)
        self.keepalive.append(c)
        ref = msgpack.ExtType(EXT_ARRAY, _pack([name, KIND_TORCH, dtype_name, list(t.shape)]))
        return self._remember(t, ref)


def _pack(obj: Any) -> bytes:
    return msgpack.packb(obj, use_bin_type=True, strict_types=False)  # type: ignore[no-any-return]


def encode_state(state: Any, *, allow_pickle: bool) -> EncodedState:
    """Split a state tree into an msgpack skeleton and the arrays for a safetensors file.

    Raises:
        CheckpointError: For a value the format cannot hold, naming its path.
    """
    enc = _Encoder(allow_pickle=allow_pickle)
    try:
        tree = enc.encode(state, ())
    except RecursionError as err:
        raise CheckpointError(f"The state nests deeper than {MAX_DEPTH} levels; flatten it.") from err
    skeleton = _pack(tree)
    check_saved_skeleton(skeleton)
    # Largest elements first, so every tensor starts aligned to its element size.
    enc.tensors.sort(key=lambda e: -e.align)
    total = sum(int(e.data.nbytes) for e in enc.tensors)
    return EncodedState(skeleton, enc.tensors, enc.used_pickle, total)


_SCAN_MAX_DEPTH = 2 * MAX_DEPTH + 8  # containers and extension records; a tuple is both

# Estimated memory of a decoded value by msgpack type byte, for values of fixed encoded
# size: (bytes following the type byte, estimated memory).
_FIXED: dict[int, tuple[int, int]] = {
    0xC0: (0, 0), 0xC2: (0, 0), 0xC3: (0, 0),  # nil, false, true: singletons
    0xCA: (4, 24), 0xCB: (8, 24),  # floats
    0xCC: (1, 0), 0xCD: (2, 32), 0xCE: (4, 32), 0xCF: (8, 36),  # uint 8..64 (uint8 <= 255: cached)
    0xD0: (1, 32), 0xD1: (2, 32), 0xD2: (4, 32), 0xD3: (8, 36),  # int 8..64
}  # fmt: skip
_PAYLOAD_EXTS = frozenset({EXT_ARRAY, EXT_TUPLE, EXT_CUSTOM, EXT_NPSCALAR})  # payload is one msgpack value
_EXT_COST = {EXT_ARRAY: 1024, EXT_NPSCALAR: 160}  # an array object (torch's is larger), a numpy scalar


def _too_costly(limit: int, size: int) -> str:
    """The one message of the memory bound, for the load (corrupt or hostile) and the save (refused)."""
    return (
        f"decoding the state would take more than {limit} bytes of memory for a file of {size} bytes "
        f"(at most {DECODE_BYTES_PER_BYTE}x its size plus {DECODE_BYTES_CONSTANT >> 20} MB)"
    )


_MAX_COST_PER_BYTE = 400
"""More than :func:`check_skeleton` charges for any byte of a skeleton (an array reference in a 3-byte
extension record is charged 1,120 bytes): a skeleton whose size times this is within
:func:`cairn._limits.decode_limit` cannot be refused for its cost, and a save need not scan it."""


def check_saved_skeleton(skeleton: bytes, *, what: str = "the state") -> None:
    """Refuse to save a skeleton that every load would refuse for the memory its decoding takes.

    A save must not write what cannot be read back (data loss): the same estimate
    as the load's (:func:`check_skeleton`), with the same bound.

    Raises:
        CheckpointError: The skeleton is over the bound; the message says how to make it fit.
    """
    n = len(skeleton)
    limit = decode_limit(n)
    if n * _MAX_COST_PER_BYTE <= limit:
        return
    try:
        check_skeleton(skeleton, where=what)
    except CorruptCheckpointError as err:
        raise CheckpointError(
            f"Cannot save {what}: {_too_costly(limit, n)}, so every load would refuse it. It holds too many small "
            "Python objects (empty lists or dicts, short strings) for its size: store such data as numpy arrays "
            "or torch tensors, which are saved apart and cost nothing here."
        ) from err


def check_skeleton(data: bytes | bytearray | memoryview, *, where: str) -> None:
    """Walk an msgpack skeleton without decoding it: structure, depth and the memory it would take.

    :func:`skeleton_cost` with the bound ``cairn._limits.decode_limit(len(data))``.
    """
    skeleton_cost(data, where=where, limit=decode_limit(len(data)))


def skeleton_cost(data: bytes | bytearray | memoryview, *, where: str, limit: int) -> int:
    """Walk an msgpack skeleton without decoding it: structure, depth and the memory it would take.

    Returns the estimated memory of the decoded values (an upper estimate of CPython's
    sizes), which ``limit`` bounds: the walk stops as soon as the estimate is over it.

    Every length in the data is checked against the bytes that remain, nesting against
    the depth bounds, and the estimated memory of the decoded values against
    ``cairn._limits.decode_limit(len(data))``, before a single object
    is built (msgpack's decoder itself preallocates what a header claims, level by level).

    Raises:
        CorruptCheckpointError: Malformed, truncated, too deep, or too costly to decode.
    """
    return _SkeletonScan(bytes(data), where, limit).run()


class _SkeletonScan:
    """The walk of :func:`skeleton_cost`: scalars inline in :meth:`run`, the rarer records in methods."""

    def __init__(self, buf: bytes, where: str, limit: int) -> None:
        self.buf, self.n, self.where, self.limit = buf, len(buf), where, limit
        self.pos = 0
        self.cost = 0
        self.rem = [1]  # items still to read at each open level
        self.ends = [-1]  # for an extension record's level, where its payload ends; else -1
        self.ext_depth = 0

    def bad(self, what: str) -> CorruptCheckpointError:
        return CorruptCheckpointError(f"{self.where}: the msgpack data is malformed ({what} at byte {self.pos}).")

    def length(self, size: int) -> int:
        if self.pos + size > self.n:
            raise self.bad("truncated length")
        return int.from_bytes(self.buf[self.pos : self.pos + size], "big")

    def run(self) -> int:
        buf, n, rem, fixed, limit = self.buf, self.n, self.rem, _FIXED, self.limit
        while rem:
            if rem[-1] == 0:
                self.close_level()
                continue
            rem[-1] -= 1
            if self.pos >= n:
                raise self.bad("truncated data")
            b = buf[self.pos]
            self.pos += 1
            if b < 0x80:  # positive fixint: a cached small int
                continue
            if b >= 0xE0:  # negative fixint
                self.cost += 32
            elif b <= 0x9F or b in (0xDC, 0xDD, 0xDE, 0xDF):
                self.container(b)
            elif b <= 0xBF:  # fixstr
                size = b & 0x1F
                if self.pos + size > n:
                    raise self.bad("a truncated string")
                self.pos += size
                if size > 1:  # "" and one-character (ASCII) strings are CPython's cached singletons
                    self.cost += 80 + size
            elif (info := fixed.get(b)) is not None:
                if self.pos + info[0] > n:
                    raise self.bad("a truncated number")
                self.pos += info[0]
                self.cost += info[1]
            elif b in (0xC4, 0xC5, 0xC6, 0xD9, 0xDA, 0xDB):  # bin / str with a length
                self.sized(b)
            elif 0xC7 <= b <= 0xC9 or 0xD4 <= b <= 0xD8:  # extension records
                self.extension(b)
            else:
                raise self.bad(f"the reserved type byte 0x{b:02x}")
            if self.cost > limit:
                raise CorruptCheckpointError(f"{self.where}: {_too_costly(limit, n)}; it is corrupt or hostile.")
        if self.pos != n:
            raise self.bad("trailing bytes after the state")
        return self.cost

    def close_level(self) -> None:
        self.rem.pop()
        end = self.ends.pop()
        if end >= 0:
            if self.pos != end:
                raise self.bad("an extension payload with trailing bytes")
            self.ext_depth -= 1

    def container(self, b: int) -> None:
        if b <= 0x8F:
            count, is_map = b & 0x0F, True
        elif b <= 0x9F:
            count, is_map = b & 0x0F, False
        else:
            size = 2 if b in (0xDC, 0xDE) else 4
            count, is_map = self.length(size), b >= 0xDE
            self.pos += size
        items = 2 * count if is_map else count
        if items > self.n - self.pos:
            raise self.bad(f"a container claiming {count} items with {self.n - self.pos} bytes left")
        # CPython's sizes (3.11-3.13): a list is 56 bytes + 8 per item; a dict 64 bytes empty,
        # 184 with up to 5 items, and at most 64 per item beyond (its hash table grows by doubling).
        self.cost += ((120 + 64 * count) if count else 64) if is_map else (56 + 8 * count)
        if items and self.cost <= self.limit:
            if len(self.rem) >= _SCAN_MAX_DEPTH:
                raise CorruptCheckpointError(
                    f"{self.where}: the state nests deeper than {_SCAN_MAX_DEPTH} levels; it is corrupt or hostile."
                )
            self.rem.append(items)
            self.ends.append(-1)

    def sized(self, b: int) -> None:
        size = 1 << ((b - 0xC4) if b <= 0xC6 else (b - 0xD9))
        ln = self.length(size)
        self.pos += size
        if ln > self.n - self.pos:
            raise self.bad(f"a string or bytes claiming {ln} bytes with {self.n - self.pos} left")
        self.pos += ln
        self.cost += 80 + ln

    def extension(self, b: int) -> None:
        buf, n = self.buf, self.n
        if b <= 0xC9:
            size = 1 << (b - 0xC7)
            ln = self.length(size)
            self.pos += size
        else:
            ln = 1 << (b - 0xD4)
        if self.pos + 1 + ln > n:
            raise self.bad(f"an extension record claiming {ln} bytes with {n - self.pos - 1} left")
        code = int.from_bytes(buf[self.pos : self.pos + 1], "big", signed=True)
        self.pos += 1
        if code not in _PAYLOAD_EXTS:  # raw payloads (big ints, pickles) or unknown codes, refused when decoded
            self.pos += ln
            self.cost += 96 + ln
            return
        self.ext_depth += 1
        if self.ext_depth > MAX_EXT_DEPTH or len(self.rem) >= _SCAN_MAX_DEPTH:
            raise CorruptCheckpointError(
                f"{self.where}: the state nests more than {MAX_EXT_DEPTH} tuples or custom values, or deeper "
                f"than {_SCAN_MAX_DEPTH} levels; it is corrupt or hostile."
            )
        self.cost += 96 + _EXT_COST.get(code, 0)
        pos = self.pos
        if code == EXT_TUPLE and ln:  # the tuple copies the list its payload decodes to
            h = buf[pos]
            if 0x90 <= h <= 0x9F:
                self.cost += 8 * (h & 0x0F)
            elif h in (0xDC, 0xDD) and pos + 1 + (2 if h == 0xDC else 4) <= n:
                self.cost += 8 * int.from_bytes(buf[pos + 1 : pos + 1 + (2 if h == 0xDC else 4)], "big")
        self.rem.append(1)
        self.ends.append(pos + ln)


ArrayLoader = Callable[[str, int, Any, list[int]], Any]
"""Callback giving the array named in a reference: (name, kind, dtype, shape) -> value."""


def decode_state(
    skeleton: bytes | bytearray | memoryview, *, load_array: ArrayLoader, allow_pickle: bool, where: str
) -> Any:
    """Rebuild a state tree from its skeleton, asking ``load_array`` for each array.

    Raises:
        CorruptCheckpointError: For malformed data, naming ``where``.
        UnsafeCheckpointError: When a pickled value is found and pickle is not allowed.
    """
    check_skeleton(skeleton, where=where)
    decoder = _Decoder(load_array, allow_pickle, where)
    try:
        return decoder.unpack(skeleton)
    except CheckpointError:
        raise
    except RecursionError as err:
        raise CorruptCheckpointError(f"{where}: the state nests too deeply to load.") from err
    except Exception as err:  # msgpack raises a handful of types for malformed input
        raise CorruptCheckpointError(f"{where}: the msgpack data is malformed ({type(err).__name__}: {err}).") from err


class _Decoder:
    """msgpack's extension hook for :func:`decode_state`: one method per record kind, nesting bounded."""

    def __init__(self, load_array: ArrayLoader, allow_pickle: bool, where: str) -> None:
        self.load_array, self.allow_pickle, self.where = load_array, allow_pickle, where
        self.depth = 0
        self.by_code: dict[int, Callable[[bytes], Any]] = {
            EXT_TUPLE: self.tuple_,
            EXT_ARRAY: self.array,
            EXT_BIGINT: self.bigint,
            EXT_NPSCALAR: self.npscalar,
            EXT_CUSTOM: self.custom,
            EXT_PICKLE: self.pickled,
        }

    def unpack(self, data: bytes | bytearray | memoryview) -> Any:
        return msgpack.unpackb(data, ext_hook=self.hook, raw=False, strict_map_key=False, use_list=True)

    def hook(self, code: int, data: bytes) -> Any:
        self.depth += 1
        try:
            if self.depth > MAX_EXT_DEPTH:
                raise CorruptCheckpointError(
                    f"{self.where}: the state nests more than {MAX_EXT_DEPTH} tuples or custom values; "
                    "it is corrupt or hostile."
                )
            decode = self.by_code.get(code)
            if decode is None:
                raise CorruptCheckpointError(f"{self.where}: unknown msgpack extension code {code}.")
            return decode(data)
        finally:
            self.depth -= 1

    def tuple_(self, data: bytes) -> Any:
        items = self.unpack(data)
        if not isinstance(items, list):
            raise CorruptCheckpointError(f"{self.where}: a tuple record is malformed.")
        return tuple(items)

    def array(self, data: bytes) -> Any:
        ref = self.unpack(data)
        if not (
            isinstance(ref, list)
            and len(ref) == 4
            and isinstance(ref[0], str)
            and ref[1] in (KIND_NUMPY, KIND_TORCH)
            and isinstance(ref[3], list)
        ):
            raise CorruptCheckpointError(f"{self.where}: an array reference is malformed.")
        return self.load_array(ref[0], ref[1], ref[2], ref[3])

    def bigint(self, data: bytes) -> Any:
        try:
            return int(data.decode("ascii"))
        except ValueError as err:
            raise CorruptCheckpointError(f"{self.where}: a big integer record is malformed.") from err

    def npscalar(self, data: bytes) -> Any:
        rec = self.unpack(data)
        if not (isinstance(rec, list) and len(rec) == 2 and isinstance(rec[1], bytes)):
            raise CorruptCheckpointError(f"{self.where}: a numpy scalar record is malformed.")
        dtype = numpy_dtype_from_descr(rec[0], where=self.where)
        if len(rec[1]) != dtype.itemsize:
            raise CorruptCheckpointError(f"{self.where}: a numpy scalar has the wrong byte size.")
        return np.frombuffer(rec[1], dtype=dtype)[0]

    def custom(self, data: bytes) -> Any:
        rec = self.unpack(data)
        if not (isinstance(rec, list) and len(rec) == 2 and isinstance(rec[0], str)):
            raise CorruptCheckpointError(f"{self.where}: a custom value record is malformed.")
        reg = registered_by_name(rec[0])
        if reg is None:
            raise IncompatibleCheckpointError(
                f"{self.where} holds a value of the registered type {rec[0]!r}, but no type is "
                "registered under that name in this program. Import the module that calls "
                "cairn.register_type for it, or register it before loading."
            )
        try:
            return reg.decode(rec[1])
        except CheckpointError:
            raise  # the decoder's own refusal names what to do
        except Exception as err:
            raise CheckpointError(f"{self.where}: the decoder registered for {rec[0]!r} failed: {err}") from err

    def pickled(self, data: bytes) -> Any:
        if not self.allow_pickle:
            raise UnsafeCheckpointError(
                f"{self.where} holds a pickled value, and unpickling can run arbitrary code. "
                "Load it with allow_pickle=True only if you trust where it came from."
            )
        try:
            return pickle.loads(data)
        except Exception as err:
            raise CorruptCheckpointError(f"{self.where}: a pickled value cannot be loaded: {err}") from err

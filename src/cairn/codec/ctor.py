"""Constructor arguments <-> JSON with type tags.

Plain JSON values stay as they are (objects whose keys are all strings, lists,
strings, finite floats, ints, booleans, null). Everything else is an object
with the single key ``"__cairn__"`` naming its type::

    {"__cairn__": "tuple", "items": [...]}
    {"__cairn__": "dict", "items": [[key, value], ...]}      non-str keys
    {"__cairn__": "float", "value": "nan" | "inf" | "-inf"}
    {"__cairn__": "bytes", "b64": "..."}
    {"__cairn__": "ndarray", "dtype": descr, "shape": [...], "b64": "..."}
    {"__cairn__": "tensor", "dtype": "float32", "shape": [...], "b64": "..."}
    {"__cairn__": "space", "space": "Box", ...}               gymnasium spaces
    {"__cairn__": "enum", "class": "mod:Qual", "name": "MEMBER"}
    {"__cairn__": "class", "class": "mod:Qual"}
    {"__cairn__": "registered", "type": name, "value": ...}   dataclasses and register_type
    {"__cairn__": "pickle", "b64": "..."}                     only with allow_pickle=True

Loading never imports anything: classes are found by their recorded path
through the one resolver (:func:`cairn.registry.resolve`: cairn's own classes,
what the program registered, what the caller passed as ``trusted=``); torch
tensors and gymnasium spaces need torch and gymnasium already imported; dtypes
come from fixed tables (:mod:`cairn.codec.dtypes`). It never unpickles unless
allowed, rebuilds registered types with the decoders the program registered,
and checks every shape and count before allocating.
"""

from __future__ import annotations

import base64
import enum
import math
import pickle
import sys
from typing import Any

import numpy as np

from cairn.codec.dtypes import numpy_dtype, torch_dtype
from cairn.codec.state import numpy_descr, unsupported_value_error
from cairn.errors import CheckpointError, CorruptCheckpointError, IncompatibleCheckpointError, UnsafeCheckpointError
from cairn.registry import (
    ENUM,
    RegisteredType,
    Trusted,
    class_argument_problem,
    class_path,
    register_passed,
    registered_by_name,
    registered_for_value,
    resolve_class,
)

TAG = "__cairn__"
MAX_DEPTH = 100


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: Any, where: str) -> bytes:
    if not isinstance(text, str):
        raise CorruptCheckpointError(f"{where}: expected base64 text.")
    try:
        return base64.b64decode(text.encode("ascii"), validate=True)
    except ValueError as err:
        raise CorruptCheckpointError(f"{where}: invalid base64 data.") from err


class CtorEncoder:
    """Encodes constructor arguments; records whether pickle was needed."""

    def __init__(self, *, allow_pickle: bool, memo: dict[int, tuple[Any, Any, bool]] | None = None) -> None:
        self.allow_pickle = allow_pickle
        self.used_pickle = False
        # id -> (value, encoded form, whether it used pickle) of registered values: the same config
        # object is the constructor argument of several folders of one save (an RL algorithm's
        # env runner, learner group and learner). Kept for one plan only (the caller's dict), whose
        # values stay alive in it, so an id names one object and the value cannot change meanwhile.
        self.memo = memo

    def encode(self, value: Any, path: tuple[Any, ...] = ()) -> Any:
        """Return a JSON-able form of ``value``."""
        if len(path) > MAX_DEPTH:
            raise CheckpointError(f"Constructor arguments nest deeper than {MAX_DEPTH} levels.")
        t = type(value)
        if value is None or t is bool or t is str or t is int:
            return value
        if t is float:
            if math.isfinite(value):
                return value
            return {TAG: "float", "value": repr(value)}
        if t is bytes:
            return {TAG: "bytes", "b64": _b64(value)}
        if t is list:
            return [self.encode(v, (*path, i)) for i, v in enumerate(value)]
        if t is tuple:
            return {TAG: "tuple", "items": [self.encode(v, (*path, i)) for i, v in enumerate(value)]}
        if t is dict:
            if all(type(k) is str for k in value) and TAG not in value:
                return {k: self.encode(v, (*path, k)) for k, v in value.items()}
            return {
                TAG: "dict",
                "items": [[self.encode(k, (*path, "<key>")), self.encode(v, (*path, k))] for k, v in value.items()],
            }
        if isinstance(value, np.ndarray) and not value.dtype.hasobject:
            arr = np.ascontiguousarray(value)
            return {
                TAG: "ndarray",
                "dtype": numpy_descr(arr.dtype),
                "shape": list(arr.shape),
                "b64": _b64(arr.tobytes()),
            }
        if isinstance(value, np.generic) and not value.dtype.hasobject:
            arr = np.asarray(value)
            return {TAG: "npscalar", "dtype": numpy_descr(arr.dtype), "b64": _b64(arr.tobytes())}
        torch = sys.modules.get("torch")
        if torch is not None and isinstance(value, torch.Tensor) and value.layout == torch.strided:
            c = value.detach().cpu().contiguous()
            raw = c.reshape(-1).view(torch.uint8).numpy().tobytes() if c.numel() else b""
            return {
                TAG: "tensor",
                "dtype": str(c.dtype).removeprefix("torch."),
                "shape": list(c.shape),
                "b64": _b64(raw),
            }
        if torch is not None and isinstance(value, torch.dtype):
            return {TAG: "torch_dtype", "name": str(value).removeprefix("torch.")}
        if isinstance(value, np.dtype) and not value.hasobject:
            return {TAG: "np_dtype", "descr": numpy_descr(value)}
        space = _encode_space(value, self, path)
        if space is not None:
            return space
        if isinstance(value, enum.Enum):
            # The program passed a member of this enum: a load in this program finds its class (SPEC 8).
            register_passed(type(value))
            return {TAG: "enum", "class": class_path(type(value)), "name": value.name}
        reg = registered_for_value(value)
        if reg is not None:
            return self._registered(value, reg, path)
        if isinstance(value, type) and "<locals>" not in value.__qualname__:
            problem = class_argument_problem(value)
            if problem is not None:
                raise CheckpointError(
                    f"Cannot record the constructor argument at {'/'.join(map(str, path))!r}: {problem}, so a "
                    "load would refuse it. Pass the class to from_checkpoint() as a keyword instead."
                )
            return {TAG: "class", "class": class_path(value)}
        if self.allow_pickle:
            self.used_pickle = True
            try:
                return {TAG: "pickle", "b64": _b64(pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL))}
            except Exception as err:
                raise CheckpointError(
                    f"Cannot pickle the constructor argument at {'/'.join(map(str, path))!r}: {err}"
                ) from err
        raise unsupported_value_error(value, path, what="constructor argument")

    def _registered(self, value: Any, reg: RegisteredType, path: tuple[Any, ...]) -> Any:
        """A registered value's tagged form: from the memo when this plan encoded this very object already."""
        known = self.memo.get(id(value)) if self.memo is not None else None
        if known is not None and known[0] is value:
            self.used_pickle = self.used_pickle or known[2]
            return known[1]
        before, self.used_pickle = self.used_pickle, False
        out = {
            TAG: "registered",
            "type": reg.name,
            "value": self.encode(reg.encode(value), (*path, f"<{reg.name}>")),
        }
        if self.memo is not None:
            self.memo[id(value)] = (value, out, self.used_pickle)
        self.used_pickle = before or self.used_pickle
        return out


def _encode_space(value: Any, enc: CtorEncoder, path: tuple[Any, ...]) -> dict[str, Any] | None:
    spaces = sys.modules.get("gymnasium.spaces")
    if spaces is None or not isinstance(value, spaces.Space):
        return None
    s = spaces
    t = type(value)
    if t is s.Box:
        return {
            TAG: "space",
            "space": "Box",
            "low": enc.encode(value.low),
            "high": enc.encode(value.high),
            "dtype": numpy_descr(np.dtype(value.dtype)),
        }
    if t is s.Discrete:
        return {TAG: "space", "space": "Discrete", "n": int(value.n), "start": int(value.start)}
    if t is s.MultiDiscrete:
        return {
            TAG: "space",
            "space": "MultiDiscrete",
            "nvec": enc.encode(value.nvec),
            "start": enc.encode(value.start),
            "dtype": numpy_descr(np.dtype(value.dtype)),
        }
    if t is s.MultiBinary:
        return {TAG: "space", "space": "MultiBinary", "n": enc.encode(value.n)}
    if t is s.Tuple:
        return {
            TAG: "space",
            "space": "Tuple",
            "spaces": [enc.encode(sp, (*path, i)) for i, sp in enumerate(value.spaces)],
        }
    if t is s.Dict:
        return {
            TAG: "space",
            "space": "Dict",
            "spaces": [[k, enc.encode(sp, (*path, k))] for k, sp in value.spaces.items()],
        }
    return None


def encode_ctor(
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    *,
    allow_pickle: bool,
    memo: dict[int, tuple[Any, Any, bool]] | None = None,
) -> tuple[dict[str, Any], bool]:
    """Encode a class's constructor arguments; returns (JSON object, used_pickle).

    ``memo``: one dict shared by the folders of one save (see :class:`CtorEncoder`), else None.
    The encoded forms it hands out are shared: the caller serializes them and changes none.
    """
    if not isinstance(args, tuple | list) or not isinstance(kwargs, dict):
        raise CheckpointError(
            "get_ctor_args_and_kwargs() must return a (tuple of args, dict of kwargs) pair, "
            f"got ({type(args).__name__}, {type(kwargs).__name__})."
        )
    enc = CtorEncoder(allow_pickle=allow_pickle, memo=memo)
    out = {
        "args": [enc.encode(a, ("args", i)) for i, a in enumerate(args)],
        "kwargs": {str(k): enc.encode(v, ("kwargs", k)) for k, v in kwargs.items()},
    }
    return out, enc.used_pickle


def decode_ctor(
    obj: Any, *, allow_pickle: bool, where: str, trusted: Trusted | None = None
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """Decode what :func:`encode_ctor` wrote.

    Every length, shape and count is checked before anything is allocated, so
    memory stays within a small multiple of the file's size; every failure is a
    :class:`~cairn.CheckpointError` naming ``where`` and the key. Classes resolve
    through the allow-list, with what the caller passed as ``trusted``.
    """
    if not (isinstance(obj, dict) and isinstance(obj.get("args"), list) and isinstance(obj.get("kwargs"), dict)):
        raise CorruptCheckpointError(f"{where}: expected an object with 'args' and 'kwargs'.")
    dec = _CtorDecoder(allow_pickle, where, trusted)
    args = tuple(dec.decode(a, ("args", i)) for i, a in enumerate(obj["args"]))
    kwargs = {k: dec.decode(v, ("kwargs", k)) for k, v in obj["kwargs"].items()}
    return args, kwargs


MAX_DIMS = 64
"""Most dimensions an array or tensor in constructor arguments may have (numpy's own limit)."""

MAX_ZERO_SIZE_ELEMENTS = 1 << 20
"""Most elements of an array whose elements take no bytes (``V0``, ``U0``): nothing bounds them by size."""

MAX_SPACE_ELEMENTS = 1 << 31
"""Most elements a gymnasium space rebuilt from constructor arguments may describe."""

_INT64_MAX = 2**63 - 1


class _CtorDecoder:
    def __init__(self, allow_pickle: bool, where: str, trusted: Trusted | None) -> None:
        self.allow_pickle = allow_pickle
        self.where = where
        self.trusted = trusted

    def at(self, path: tuple[Any, ...]) -> str:
        return f"{self.where}, at {'/'.join(map(str, path)) or '<root>'}"

    def fail(self, path: tuple[Any, ...], msg: str) -> CorruptCheckpointError:
        return CorruptCheckpointError(f"{self.at(path)}: {msg} The file is corrupt or was tampered with.")

    def decode(self, v: Any, path: tuple[Any, ...]) -> Any:
        if len(path) > MAX_DEPTH:
            raise self.fail(path[:4], f"constructor arguments nest deeper than {MAX_DEPTH} levels.")
        if isinstance(v, list):
            return [self.decode(x, (*path, i)) for i, x in enumerate(v)]
        if not isinstance(v, dict):
            return v
        if TAG not in v:
            return {k: self.decode(x, (*path, k)) for k, x in v.items()}
        tag = v[TAG]
        try:
            return self._tagged(tag, v, path)
        except CheckpointError:
            raise
        except (KeyError, TypeError, ValueError, OverflowError, IndexError, AttributeError) as err:
            raise self.fail(path, f"malformed {tag!r} record ({type(err).__name__}: {err}).") from err

    def _shape(self, raw: Any, path: tuple[Any, ...]) -> tuple[tuple[int, ...], int]:
        """A shape read from the file, checked, and its element count (exact, in Python ints)."""
        if not (
            isinstance(raw, list) and len(raw) <= MAX_DIMS and all(type(d) is int and 0 <= d <= _INT64_MAX for d in raw)
        ):
            raise self.fail(path, f"a shape must be a list of at most {MAX_DIMS} sizes >= 0, got {str(raw)[:80]}.")
        shape = tuple(raw)
        return shape, math.prod(shape)

    def _tagged(self, tag: Any, v: dict[str, Any], path: tuple[Any, ...]) -> Any:
        if tag == "tuple":
            items = v["items"]
            if not isinstance(items, list):
                raise self.fail(path, "a tuple record holds no list.")
            return tuple(self.decode(x, (*path, i)) for i, x in enumerate(items))
        if tag == "dict":
            pairs = v["items"]
            if not (isinstance(pairs, list) and all(isinstance(p, list) and len(p) == 2 for p in pairs)):
                raise self.fail(path, "a dict record is not a list of [key, value] pairs.")
            return {self.decode(k, (*path, "<key>")): self.decode(x, (*path, i)) for i, (k, x) in enumerate(pairs)}
        if tag == "float":
            if not isinstance(v["value"], str) or v["value"] not in ("nan", "inf", "-inf"):
                raise self.fail(path, f"invalid float {str(v['value'])[:40]!r}.")
            return float(v["value"])
        if tag == "bytes":
            return _unb64(v["b64"], self.at(path))
        if tag == "ndarray":
            return self._ndarray(v, path)
        if tag == "npscalar":
            dtype = numpy_dtype(v["dtype"], where=self.at(path))
            raw = _unb64(v["b64"], self.at(path))
            if dtype.itemsize == 0 or len(raw) != dtype.itemsize:
                raise self.fail(path, "a numpy scalar has the wrong byte size.")
            return np.frombuffer(raw, dtype=dtype)[0]
        if tag == "tensor":
            return self._tensor(v, path)
        if tag == "torch_dtype":
            return torch_dtype(v["name"], where=self.at(path), what="dtypes in its constructor arguments")
        if tag == "np_dtype":
            return numpy_dtype(v["descr"], where=self.at(path))
        if tag == "space":
            return self._space(v, path)
        if tag == "enum":
            return self._enum(v, path)
        if tag == "class":
            return self._class(v, path)
        if tag == "registered":
            return self._registered(v, path)
        if tag == "pickle":
            if not self.allow_pickle:
                raise UnsafeCheckpointError(
                    f"{self.at(path)} holds a pickled constructor argument, and unpickling can run "
                    "arbitrary code. Pass allow_pickle=True only if you trust the checkpoint."
                )
            return pickle.loads(_unb64(v["b64"], self.at(path)))
        raise self.fail(path, f"unknown type tag {str(tag)[:80]!r}.")

    def _ndarray(self, v: dict[str, Any], path: tuple[Any, ...]) -> Any:
        dtype = numpy_dtype(v["dtype"], where=self.at(path))
        shape, count = self._shape(v["shape"], path)
        raw = _unb64(v["b64"], self.at(path))
        if dtype.itemsize == 0:
            # numpy cannot view bytes as zero-size elements; nothing bounds their count but this.
            if raw or count > MAX_ZERO_SIZE_ELEMENTS:
                raise self.fail(path, "an array of zero-size elements is malformed or too large.")
            return np.zeros(shape, dtype=dtype)
        if len(raw) != count * dtype.itemsize:
            raise self.fail(path, "an array's bytes do not match its shape and dtype.")
        return np.frombuffer(raw, dtype=dtype).reshape(shape).copy()

    def _enum(self, v: dict[str, Any], path: tuple[Any, ...]) -> Any:
        cls = resolve_class(v["class"], where=self.at(path), trusted=self.trusted, role=ENUM)
        if not issubclass(cls, enum.Enum):
            raise self.fail(path, f"{v['class']!r} is not an enum class.")
        name = v["name"]
        members = cls.__members__
        if not isinstance(name, str) or name not in members:
            raise IncompatibleCheckpointError(
                f"{self.at(path)}: the enum {v['class']} has no member {str(name)[:80]!r} any more. "
                f"Its members are {', '.join(list(members)[:20])}."
            )
        return members[name]

    def _class(self, v: dict[str, Any], path: tuple[Any, ...]) -> Any:
        return resolve_class(v["class"], where=self.at(path), trusted=self.trusted)

    def _registered(self, v: dict[str, Any], path: tuple[Any, ...]) -> Any:
        name = v["type"]
        reg = registered_by_name(name)
        if reg is None:
            raise IncompatibleCheckpointError(
                f"{self.at(path)} holds a value of the registered type {str(name)[:200]!r}, but no type is "
                "registered under that name in this program, and cairn never imports a module a file "
                "names. Import the module that registers it first (cairn CLI: --import MODULE), or use "
                "cairn.register_class_alias if it moved."
            )
        value = self.decode(v["value"], (*path, f"<{reg.name}>"))
        try:
            return reg.decode(value)
        except CheckpointError:
            raise  # the decoder's own refusal (a recorded load_state_path) names what to do
        except Exception as err:  # the program's own decoder (or dataclass) refused the recorded value
            raise IncompatibleCheckpointError(
                f"{self.at(path)}: the recorded value does not fit the registered type {reg.name!r} "
                f"({type(err).__name__}: {err})."
            ) from err

    def _tensor(self, v: dict[str, Any], path: tuple[Any, ...]) -> Any:
        t_dtype = torch_dtype(v["dtype"], where=self.at(path), what="tensors in its constructor arguments")
        torch = sys.modules["torch"]
        shape, count = self._shape(v["shape"], path)
        buf = bytearray(_unb64(v["b64"], self.at(path)))
        if len(buf) != count * t_dtype.itemsize:
            raise self.fail(path, "a tensor's bytes do not match its shape and dtype.")
        try:
            if count == 0:
                return torch.empty(shape, dtype=t_dtype)
            return torch.frombuffer(buf, dtype=torch.uint8).view(t_dtype).reshape(shape).clone()
        except RuntimeError as err:  # dtypes torch cannot view bytes as (quantized, sub-byte)
            raise self.fail(path, f"a tensor of dtype {v['dtype']} cannot be rebuilt ({err}).") from err

    def _space(self, v: dict[str, Any], path: tuple[Any, ...]) -> Any:
        spaces = sys.modules.get("gymnasium.spaces")
        if spaces is None:
            raise IncompatibleCheckpointError(
                f"{self.at(path)}: this checkpoint holds gymnasium spaces in its constructor arguments, and "
                "this program has not imported gymnasium. Import gymnasium first (cairn CLI: --import gymnasium)."
            )
        kind = v["space"]
        if kind in ("Tuple", "Dict"):
            items = v["spaces"]
            if not isinstance(items, list):
                raise self.fail(path, f"a {kind} space holds no list of spaces.")
            if kind == "Tuple":
                return self._build(spaces.Tuple, path, [self.decode(x, (*path, i)) for i, x in enumerate(items)])
            if not all(isinstance(p, list) and len(p) == 2 and isinstance(p[0], str) for p in items):
                raise self.fail(path, "a Dict space is not a list of [name, space] pairs.")
            return self._build(spaces.Dict, path, {k: self.decode(x, (*path, k)) for k, x in items})
        if kind == "Discrete":
            n, start = v["n"], v["start"]
            if not (type(n) is int and type(start) is int and 1 <= n <= _INT64_MAX and start >= -_INT64_MAX):
                raise self.fail(path, f"a Discrete space needs 1 <= n <= 2**63-1 and an int start, got n={n!r}.")
            if start + n - 1 > _INT64_MAX:
                raise self.fail(path, "a Discrete space's start + n overflows 64 bits.")
            return self._build(spaces.Discrete, path, n, start=start)
        if kind == "MultiBinary":
            n = self.decode(v["n"], (*path, "n"))
            dims = n.tolist() if isinstance(n, np.ndarray) else n
            dims = [dims] if type(dims) is int else list(dims) if isinstance(dims, tuple) else dims
            if not (
                isinstance(dims, list) and 0 < len(dims) <= MAX_DIMS and all(type(d) is int and d >= 0 for d in dims)
            ):
                raise self.fail(path, "a MultiBinary space's n must be a size or a list of sizes.")
            self._check_elements(math.prod(dims), path)
            return self._build(spaces.MultiBinary, path, n)
        if kind == "Box":
            dtype = numpy_dtype(v["dtype"], where=self.at(path))
            low, high = self.decode(v["low"], (*path, "low")), self.decode(v["high"], (*path, "high"))
            for bound in (low, high):
                if not (isinstance(bound, np.ndarray | np.generic | int | float) and not isinstance(bound, bool)):
                    raise self.fail(path, f"a Box bound must be an array or a number, got {type(bound).__name__}.")
            return self._build(spaces.Box, path, low=low, high=high, dtype=dtype)
        if kind == "MultiDiscrete":
            dtype = numpy_dtype(v["dtype"], where=self.at(path))
            nvec, start = self.decode(v["nvec"], (*path, "nvec")), self.decode(v["start"], (*path, "start"))
            for arr in (nvec, start):
                if not isinstance(arr, np.ndarray) or arr.dtype.kind not in "iu":
                    raise self.fail(path, "a MultiDiscrete space's nvec and start must be integer arrays.")
            return self._build(spaces.MultiDiscrete, path, nvec, start=start, dtype=dtype)
        raise self.fail(path, f"unknown gymnasium space {str(kind)[:80]!r}.")

    def _check_elements(self, count: int, path: tuple[Any, ...]) -> None:
        if count > MAX_SPACE_ELEMENTS:
            raise self.fail(path, f"a space of {count} elements is larger than {MAX_SPACE_ELEMENTS}.")

    def _build(self, factory: Any, path: tuple[Any, ...], *args: Any, **kwargs: Any) -> Any:
        # gymnasium checks what it is given with asserts and numpy calls that raise many types.
        try:
            return factory(*args, **kwargs)
        except Exception as err:
            raise self.fail(
                path,
                f"gymnasium refused the recorded {factory.__name__} space ({type(err).__name__}: {str(err)[:200]}).",
            ) from err

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

Loading imports classes by their recorded path (through aliases), never
unpickles unless allowed, and rebuilds registered types with the decoders the
program registered.
"""

from __future__ import annotations

import base64
import enum
import math
import pickle
import sys
from typing import Any

import numpy as np

from cairn.codec.state import numpy_descr, numpy_dtype_from_descr, unsupported_value_error
from cairn.errors import CheckpointError, CorruptCheckpointError, UnsafeCheckpointError
from cairn.registry import class_path, registered_by_name, registered_for_value, resolve_class

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

    def __init__(self, *, allow_pickle: bool) -> None:
        self.allow_pickle = allow_pickle
        self.used_pickle = False

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
            return {TAG: "enum", "class": class_path(type(value)), "name": value.name}
        reg = registered_for_value(value)
        if reg is not None:
            return {
                TAG: "registered",
                "type": reg.name,
                "value": self.encode(reg.encode(value), (*path, f"<{reg.name}>")),
            }
        if isinstance(value, type) and "<locals>" not in value.__qualname__:
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


def encode_ctor(args: tuple[Any, ...], kwargs: dict[str, Any], *, allow_pickle: bool) -> tuple[dict[str, Any], bool]:
    """Encode a class's constructor arguments; returns (JSON object, used_pickle)."""
    if not isinstance(args, tuple | list) or not isinstance(kwargs, dict):
        raise CheckpointError(
            "get_ctor_args_and_kwargs() must return a (tuple of args, dict of kwargs) pair, "
            f"got ({type(args).__name__}, {type(kwargs).__name__})."
        )
    enc = CtorEncoder(allow_pickle=allow_pickle)
    out = {
        "args": [enc.encode(a, ("args", i)) for i, a in enumerate(args)],
        "kwargs": {str(k): enc.encode(v, ("kwargs", k)) for k, v in kwargs.items()},
    }
    return out, enc.used_pickle


def decode_ctor(obj: Any, *, allow_pickle: bool, where: str) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """Decode what :func:`encode_ctor` wrote."""
    if not (isinstance(obj, dict) and isinstance(obj.get("args"), list) and isinstance(obj.get("kwargs"), dict)):
        raise CorruptCheckpointError(f"{where}: expected an object with 'args' and 'kwargs'.")
    dec = _CtorDecoder(allow_pickle, where)
    args = tuple(dec.decode(a, 0) for a in obj["args"])
    kwargs = {k: dec.decode(v, 0) for k, v in obj["kwargs"].items()}
    return args, kwargs


class _CtorDecoder:
    def __init__(self, allow_pickle: bool, where: str) -> None:
        self.allow_pickle = allow_pickle
        self.where = where

    def fail(self, msg: str) -> CorruptCheckpointError:
        return CorruptCheckpointError(f"{self.where}: {msg}")

    def decode(self, v: Any, depth: int) -> Any:
        if depth > MAX_DEPTH:
            raise self.fail(f"constructor arguments nest deeper than {MAX_DEPTH} levels.")
        if isinstance(v, list):
            return [self.decode(x, depth + 1) for x in v]
        if not isinstance(v, dict):
            return v
        if TAG not in v:
            return {k: self.decode(x, depth + 1) for k, x in v.items()}
        tag = v[TAG]
        try:
            return self._tagged(tag, v, depth)
        except (KeyError, TypeError, ValueError) as err:
            raise self.fail(f"malformed {tag!r} record ({type(err).__name__}: {err}).") from err

    def _tagged(self, tag: Any, v: dict[str, Any], depth: int) -> Any:
        d = depth + 1
        if tag == "tuple":
            return tuple(self.decode(x, d) for x in v["items"])
        if tag == "dict":
            return {self.decode(k, d): self.decode(x, d) for k, x in v["items"]}
        if tag == "float":
            if v["value"] not in ("nan", "inf", "-inf"):
                raise self.fail(f"invalid float {v['value']!r}.")
            return float(v["value"])
        if tag == "bytes":
            return _unb64(v["b64"], self.where)
        if tag == "ndarray":
            dtype = numpy_dtype_from_descr(v["dtype"], where=self.where)
            raw = _unb64(v["b64"], self.where)
            shape = tuple(int(x) for x in v["shape"])
            if len(raw) != int(np.prod(shape, dtype=np.int64)) * dtype.itemsize:
                raise self.fail("an array's bytes do not match its shape and dtype.")
            return np.frombuffer(raw, dtype=dtype).reshape(shape).copy()
        if tag == "npscalar":
            dtype = numpy_dtype_from_descr(v["dtype"], where=self.where)
            raw = _unb64(v["b64"], self.where)
            if len(raw) != dtype.itemsize:
                raise self.fail("a numpy scalar has the wrong byte size.")
            return np.frombuffer(raw, dtype=dtype)[0]
        if tag == "tensor":
            import torch

            t_dtype = getattr(torch, str(v["dtype"]), None)
            if not isinstance(t_dtype, torch.dtype):
                raise self.fail(f"unknown torch dtype {v['dtype']!r}.")
            buf = bytearray(_unb64(v["b64"], self.where))
            t_shape = [int(x) for x in v["shape"]]
            n = int(np.prod(t_shape, dtype=np.int64))
            if len(buf) != n * t_dtype.itemsize:
                raise self.fail("a tensor's bytes do not match its shape and dtype.")
            if n == 0:
                return torch.empty(t_shape, dtype=t_dtype)
            return torch.frombuffer(buf, dtype=torch.uint8).view(t_dtype).reshape(t_shape).clone()
        if tag == "torch_dtype":
            import torch

            dt = getattr(torch, str(v["name"]), None)
            if not isinstance(dt, torch.dtype):
                raise self.fail(f"unknown torch dtype {v['name']!r}.")
            return dt
        if tag == "np_dtype":
            return numpy_dtype_from_descr(v["descr"], where=self.where)
        if tag == "space":
            return self._space(v, d)
        if tag == "enum":
            cls = resolve_class(str(v["class"]), where=self.where)
            if not issubclass(cls, enum.Enum):
                raise self.fail(f"{v['class']!r} is not an enum class.")
            try:
                return cls[str(v["name"])]
            except KeyError as err:
                raise CheckpointError(
                    f"{self.where}: the enum {v['class']} has no member {v['name']!r} any more."
                ) from err
        if tag == "class":
            return resolve_class(str(v["class"]), where=self.where)
        if tag == "registered":
            reg = registered_by_name(str(v["type"]))
            if reg is None:
                raise CheckpointError(
                    f"{self.where} holds a value of the registered type {v['type']!r}, but no type "
                    "is registered under that name. Import the module that registers it, or use "
                    "cairn.register_class_alias if it moved."
                )
            return reg.decode(self.decode(v["value"], d))
        if tag == "pickle":
            if not self.allow_pickle:
                raise UnsafeCheckpointError(
                    f"{self.where} holds a pickled constructor argument, and unpickling can run "
                    "arbitrary code. Pass allow_pickle=True only if you trust the checkpoint."
                )
            return pickle.loads(_unb64(v["b64"], self.where))
        raise self.fail(f"unknown type tag {tag!r}.")

    def _space(self, v: dict[str, Any], d: int) -> Any:
        from gymnasium import spaces

        kind = v["space"]
        if kind == "Box":
            return spaces.Box(
                low=self.decode(v["low"], d),
                high=self.decode(v["high"], d),
                dtype=numpy_dtype_from_descr(v["dtype"], where=self.where),
            )
        if kind == "Discrete":
            return spaces.Discrete(int(v["n"]), start=int(v["start"]))
        if kind == "MultiDiscrete":
            return spaces.MultiDiscrete(
                self.decode(v["nvec"], d),
                start=self.decode(v["start"], d),
                dtype=numpy_dtype_from_descr(v["dtype"], where=self.where),
            )
        if kind == "MultiBinary":
            return spaces.MultiBinary(self.decode(v["n"], d))
        if kind == "Tuple":
            return spaces.Tuple([self.decode(x, d) for x in v["spaces"]])
        if kind == "Dict":
            return spaces.Dict({k: self.decode(x, d) for k, x in v["spaces"]})
        raise self.fail(f"unknown gymnasium space {kind!r}.")

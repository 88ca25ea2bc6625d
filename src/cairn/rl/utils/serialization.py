"""RLlib's space serialization (``ray.rllib.utils.serialization``): gymnasium spaces as JSON dicts and back.

The dicts are RLlib's layout (``{"space": "box", "low": ..., "high": ..., "shape": ...,
"dtype": ...}``; arrays as base64 of zlib-compressed ``.npy`` bytes), so a dict RLlib
wrote reads here and the other way round. Unlike RLlib, reading never unpickles
(``np.load(allow_pickle=False)``: an object array is refused), bounds the decompressed
bytes before it allocates them, bounds the nesting, and takes only the kinds it knows
(an allow-list; anything else is refused with a ``ValueError``).
"""

from __future__ import annotations

import base64
import binascii
import io
import math
import zlib
from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np

from cairn.rl.utils.spaces.flexdict import FlexDict
from cairn.rl.utils.spaces.repeated import Repeated
from cairn.rl.utils.spaces.simplex import Simplex

__all__ = ["gym_space_from_dict", "gym_space_to_dict", "space_from_dict", "space_to_dict"]

MAX_ARRAY_BYTES = 1 << 26
"""Most bytes one serialized array (a Box bound, say) may decompress to (64 MiB)."""

MAX_DEPTH = 64
"""Deepest nesting of Tuple/Dict/Repeated spaces read."""

MAX_ELEMENTS = MAX_ARRAY_BYTES // 8
"""Most elements a space's shape (or a multi-binary's ``n``) may name: gymnasium broadcasts a
scalar bound to the whole shape, so a small dict could otherwise ask for terabytes."""


def _array_to_str(array: np.ndarray[Any, Any]) -> str:
    buf = io.BytesIO()
    np.save(buf, np.asarray(array), allow_pickle=False)
    return base64.b64encode(zlib.compress(buf.getvalue())).decode("ascii")


def _array_from_str(text: Any, where: str) -> np.ndarray[Any, Any]:
    if not isinstance(text, str):
        raise ValueError(f"gym_space_from_dict: {where} is no base64 string.")
    try:
        inflater = zlib.decompressobj()
        raw = inflater.decompress(base64.b64decode(text, validate=True), MAX_ARRAY_BYTES)
    except (binascii.Error, zlib.error) as err:
        raise ValueError(f"gym_space_from_dict: {where} is no base64 zlib .npy array ({err}).") from err
    if inflater.unconsumed_tail:
        raise ValueError(f"gym_space_from_dict: {where} decompresses to more than {MAX_ARRAY_BYTES} bytes.")
    try:
        # Never unpickles: an object array (RLlib's reader would run its pickle) is refused here.
        array: np.ndarray[Any, Any] = np.load(io.BytesIO(raw), allow_pickle=False)
    except (ValueError, OSError, EOFError) as err:
        raise ValueError(f"gym_space_from_dict: {where} is no base64 zlib .npy array of numbers ({err}).") from err
    return array


def gym_space_to_dict(space: gym.Space[Any] | None) -> dict[str, Any] | None:
    """``space`` as RLlib's JSON dict (None for None).

    Raises:
        ValueError: A space of a kind RLlib's format has no entry for.
    """
    if space is None:
        return None
    # Subclasses first: FlexDict is a Dict.
    if isinstance(space, FlexDict):
        return {"space": "flex_dict", **{k: gym_space_to_dict(s) for k, s in space.spaces.items()}}
    if isinstance(space, gym.spaces.Box):
        return {
            "space": "box",
            "low": _array_to_str(space.low),
            "high": _array_to_str(space.high),
            "shape": list(space.shape),
            "dtype": np.dtype(space.dtype).str,
        }
    if isinstance(space, gym.spaces.Discrete):
        return {"space": "discrete", "n": int(space.n), "start": int(space.start)}
    if isinstance(space, gym.spaces.MultiBinary):
        n = space.n
        return {"space": "multi-binary", "n": int(n) if isinstance(n, int | np.integer) else [int(d) for d in n]}
    if isinstance(space, gym.spaces.MultiDiscrete):
        return {"space": "multi-discrete", "nvec": _array_to_str(space.nvec), "dtype": np.dtype(space.dtype).str}
    if isinstance(space, gym.spaces.Tuple):
        return {"space": "tuple", "spaces": [gym_space_to_dict(s) for s in space.spaces]}
    if isinstance(space, gym.spaces.Dict):
        return {"space": "dict", "spaces": {k: gym_space_to_dict(s) for k, s in space.spaces.items()}}
    if isinstance(space, Simplex):
        return {
            "space": "simplex",
            "shape": list(space.shape or ()),
            "concentration": _array_to_str(space.concentration),
            "dtype": np.dtype(space.dtype).str,
        }
    if isinstance(space, Repeated):
        return {"space": "repeated", "child_space": gym_space_to_dict(space.child_space), "max_len": space.max_len}
    if isinstance(space, gym.spaces.Text):
        return {
            "space": "text",
            "min_length": int(space.min_length),
            "max_length": int(space.max_length),
            "charset": "".join(sorted(space.character_set)),
        }
    raise ValueError(
        f"gym_space_to_dict: {type(space).__name__} has no serialized form; RLlib's are Box, Discrete, "
        "MultiBinary, MultiDiscrete, Tuple, Dict, Simplex, Repeated, FlexDict and Text."
    )


def _int(d: Mapping[str, Any], key: str, kind: str) -> int:
    value = d.get(key)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"gym_space_from_dict: a {kind} space's {key!r} must be an int, got {value!r:.40}.")
    return value


def _dtype(d: Mapping[str, Any], kind: str) -> np.dtype[Any]:
    try:
        dtype: np.dtype[Any] = np.dtype(d["dtype"])
    except (KeyError, TypeError) as err:
        raise ValueError(f"gym_space_from_dict: a {kind} space has no valid dtype ({err}).") from err
    if dtype.kind not in "biuf":
        raise ValueError(f"gym_space_from_dict: a {kind} space's dtype {dtype} is no number type.")
    return dtype


def _shape(d: Mapping[str, Any], kind: str) -> tuple[int, ...]:
    shape = d.get("shape")
    if not isinstance(shape, list | tuple) or not all(isinstance(s, int) and not isinstance(s, bool) for s in shape):
        raise ValueError(f"gym_space_from_dict: a {kind} space's shape must be a list of ints, got {shape!r:.60}.")
    return _bounded(tuple(shape), kind)


def _bounded(shape: tuple[int, ...], kind: str) -> tuple[int, ...]:
    """``shape`` if it names at most :data:`MAX_ELEMENTS` elements and no negative size (checked before
    gymnasium allocates its bounds)."""
    if any(s < 0 for s in shape) or math.prod(shape) > MAX_ELEMENTS:
        raise ValueError(
            f"gym_space_from_dict: a {kind} space's shape {shape!r:.60} is refused: sizes must be non-negative "
            f"and name at most {MAX_ELEMENTS} elements."
        )
    return shape


def _from_dict(d: Any, depth: int) -> gym.Space[Any]:
    if depth > MAX_DEPTH:
        raise ValueError(f"gym_space_from_dict: spaces nested deeper than {MAX_DEPTH}.")
    if not isinstance(d, Mapping) or not isinstance(d.get("space"), str):
        raise ValueError(f"gym_space_from_dict: {d!r:.80} is no serialized space (a dict with a 'space' name).")
    kind = d["space"]
    if kind == "box":
        low, high = _array_from_str(d.get("low"), "a box's low"), _array_from_str(d.get("high"), "a box's high")
        return gym.spaces.Box(low=low, high=high, shape=_shape(d, kind), dtype=_dtype(d, kind))
    if kind == "discrete":
        return gym.spaces.Discrete(_int(d, "n", kind), start=_int(d, "start", kind) if "start" in d else 0)
    if kind == "multi-binary":
        n = d.get("n")
        if isinstance(n, bool) or not (isinstance(n, int) or (isinstance(n, list) and all(type(x) is int for x in n))):
            raise ValueError(f"gym_space_from_dict: a multi-binary space's n must be an int or ints, got {n!r:.40}.")
        _bounded((n,) if isinstance(n, int) else tuple(n), kind)
        return gym.spaces.MultiBinary(n)
    if kind == "multi-discrete":
        return gym.spaces.MultiDiscrete(
            _array_from_str(d.get("nvec"), "a multi-discrete's nvec"), dtype=_dtype(d, kind)
        )
    if kind == "tuple":
        if not isinstance(d.get("spaces"), list):
            raise ValueError("gym_space_from_dict: a tuple space holds no list of spaces.")
        return gym.spaces.Tuple([_from_dict(s, depth + 1) for s in d["spaces"]])
    if kind == "dict":
        if not isinstance(d.get("spaces"), Mapping):
            raise ValueError("gym_space_from_dict: a dict space holds no dict of spaces.")
        return gym.spaces.Dict({k: _from_dict(s, depth + 1) for k, s in d["spaces"].items()})
    if kind == "simplex":
        conc = _array_from_str(d.get("concentration"), "a simplex's concentration")
        return Simplex(shape=_shape(d, kind), concentration=conc, dtype=_dtype(d, kind))
    if kind == "repeated":
        return Repeated(_from_dict(d.get("child_space"), depth + 1), max_len=_int(d, "max_len", kind))
    if kind == "flex_dict":
        return FlexDict({k: _from_dict(s, depth + 1) for k, s in d.items() if k != "space"})
    if kind == "text":
        charset = d.get("charset")
        if not isinstance(charset, str) or not charset:
            raise ValueError("gym_space_from_dict: a text space's charset must be a non-empty string.")
        return gym.spaces.Text(
            max_length=_int(d, "max_length", kind), min_length=_int(d, "min_length", kind), charset=charset
        )
    raise ValueError(
        f"gym_space_from_dict: unknown space kind {kind!r:.40}; known: box, discrete, multi-binary, "
        "multi-discrete, tuple, dict, simplex, repeated, flex_dict, text."
    )


def gym_space_from_dict(d: Mapping[str, Any]) -> gym.Space[Any]:
    """The space :func:`gym_space_to_dict` (or RLlib's) wrote as ``d``.

    Raises:
        ValueError: An unknown kind, a missing or mistyped field, an array that is no
            ``.npy`` of numbers or decompresses beyond :data:`MAX_ARRAY_BYTES`, nesting
            beyond :data:`MAX_DEPTH`, or values gymnasium refuses.
    """
    return _from_dict(d, 0)


def space_to_dict(space: gym.Space[Any]) -> dict[str, Any]:
    """``{"space": gym_space_to_dict(space)}``, with ``"original_space"`` when the space has one (RLlib's)."""
    out: dict[str, Any] = {"space": gym_space_to_dict(space)}
    original = getattr(space, "original_space", None)
    if original is not None:
        out["original_space"] = space_to_dict(original)
    return out


def space_from_dict(d: Mapping[str, Any]) -> gym.Space[Any]:
    """The space :func:`space_to_dict` wrote, its ``original_space`` set again (RLlib's).

    Raises:
        ValueError: What :func:`gym_space_from_dict` refuses, or no ``"space"`` entry.
    """
    if not isinstance(d, Mapping) or "space" not in d:
        raise ValueError("space_from_dict: give the dict space_to_dict wrote (with a 'space' entry).")
    space = gym_space_from_dict(d["space"])
    original = d.get("original_space")
    if original is not None:
        # RLlib's older dicts hold the original space itself (its "space" entry a kind name).
        space.original_space = (  # type: ignore[attr-defined]
            gym_space_from_dict(original) if isinstance(original.get("space"), str) else space_from_dict(original)
        )
    return space

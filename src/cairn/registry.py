"""Registries users extend: custom value types and class aliases.

Loading a checkpoint never runs code that came from the file. Classes named in
a checkpoint are looked up by import path (through the alias table first), and
values of custom types are rebuilt by decoders registered here, in the
program, never by code stored in the checkpoint.
"""

from __future__ import annotations

import dataclasses
import enum
import importlib
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from cairn.errors import CheckpointError, IncompatibleCheckpointError

__all__ = [
    "RegisteredType",
    "class_path",
    "register_class_alias",
    "register_type",
    "resolve_class",
]

T = TypeVar("T")


@dataclass(frozen=True)
class RegisteredType:
    """How values of one registered class are encoded and rebuilt.

    Attributes:
        cls: The registered class.
        name: The stable name recorded in checkpoints (default ``module:QualName``).
        encode: Turns a value into a tree of plain values (dicts, lists, scalars, arrays).
        decode: Rebuilds a value from what ``encode`` returned.
    """

    cls: type
    name: str
    encode: Callable[[Any], Any]
    decode: Callable[[Any], Any]


_TYPES_BY_CLASS: dict[type, RegisteredType] = {}
_TYPES_BY_NAME: dict[str, RegisteredType] = {}
_ALIASES: dict[str, type] = {}


def class_path(cls: type) -> str:
    """Return the ``"module:QualName"`` path that names ``cls`` in checkpoints."""
    return f"{cls.__module__}:{cls.__qualname__}"


def _dataclass_encode(value: Any) -> dict[str, Any]:
    return {f.name: getattr(value, f.name) for f in dataclasses.fields(value) if f.init}


def register_type(
    cls: type[T] | None = None,
    *,
    name: str | None = None,
    encode: Callable[[T], Any] | None = None,
    decode: Callable[[Any], T] | None = None,
) -> Any:
    """Register a class so that its values can be stored in checkpoints without pickle.

    Works as a plain call or as a class decorator. Dataclasses need no
    functions: their init fields are stored and passed back to the
    constructor. Other classes must give ``encode`` (value to a tree of plain
    values) and ``decode`` (the inverse).

    Example::

        @cairn.register_type
        @dataclasses.dataclass
        class Config:
            lr: float = 3e-4

        cairn.register_type(Fraction, encode=lambda f: [f.numerator, f.denominator],
                            decode=lambda v: Fraction(*v))

    Args:
        cls: The class to register.
        name: The name recorded in checkpoints; defaults to ``"module:QualName"``.
            Give a stable name if the class may move.
        encode: Value -> plain tree. Required unless ``cls`` is a dataclass.
        decode: Plain tree -> value. Required unless ``cls`` is a dataclass.

    Returns:
        ``cls`` itself, so that it can decorate a class.
    """

    def _register(klass: type[T]) -> type[T]:
        enc: Callable[[Any], Any]
        dec: Callable[[Any], Any]
        if encode is None and decode is None and dataclasses.is_dataclass(klass):
            enc = _dataclass_encode

            def dec(fields: Any) -> Any:
                return klass(**fields)
        elif encode is not None and decode is not None:
            enc, dec = encode, decode
        else:
            raise CheckpointError(
                f"register_type({klass.__qualname__}) needs both encode= and decode= "
                "because the class is not a dataclass."
            )
        reg_name = name or class_path(klass)
        existing = _TYPES_BY_NAME.get(reg_name)
        if existing is not None and existing.cls is not klass:
            # Re-registering the same path happens when a module is reloaded; the
            # newest class object wins so that decoded values have the live class.
            _TYPES_BY_CLASS.pop(existing.cls, None)
        entry = RegisteredType(cls=klass, name=reg_name, encode=enc, decode=dec)
        _TYPES_BY_CLASS[klass] = entry
        _TYPES_BY_NAME[reg_name] = entry
        return klass

    if cls is None:
        return _register
    return _register(cls)


def registered_for_value(value: Any) -> RegisteredType | None:
    """Return the registration for ``type(value)`` (exact class), if any."""
    return _TYPES_BY_CLASS.get(type(value))


def registered_by_name(name: str) -> RegisteredType | None:
    """Return the registration recorded under ``name``, importing its module if needed.

    A checkpoint written by one program may be read by another that has not
    imported the module that registers the type yet; importing the module named
    in the recorded path runs that module's own (installed) code, which is how
    every class-by-path lookup works, and never code from the checkpoint.
    """
    entry = _TYPES_BY_NAME.get(name)
    if entry is not None:
        return entry
    if name in _ALIASES:
        alias_cls = _ALIASES[name]
        return _TYPES_BY_CLASS.get(alias_cls)
    module_name = name.partition(":")[0]
    if module_name and ":" in name and import_allowed(module_name):
        try:
            importlib.import_module(module_name)
        except ImportError:
            return None
    return _TYPES_BY_NAME.get(name)


def import_allowed(module_name: str) -> bool:
    """Whether a module named in a checkpoint may be imported to find a class.

    Only modules of packages the program has already loaded: a checkpoint may
    make cairn import ``mylib.policies`` once ``mylib`` is in use, but never an
    unrelated installed module whose import has side effects.
    """
    return module_name.split(".", 1)[0] in sys.modules


def register_class_alias(old_path: str, new_class: type) -> None:
    """Make checkpoints that name ``old_path`` load ``new_class`` instead.

    Use it when a class moved to another module or was renamed::

        cairn.register_class_alias("mylib.old_module:OldPolicy", NewPolicy)

    Args:
        old_path: The path recorded in old checkpoints, ``"module:QualName"``.
        new_class: The class to use in its place.
    """
    if ":" not in old_path:
        raise CheckpointError(f"register_class_alias: {old_path!r} is not of the form 'module:QualName'.")
    _ALIASES[old_path] = new_class
    entry = _TYPES_BY_CLASS.get(new_class)
    if entry is not None:
        _TYPES_BY_NAME.setdefault(old_path, entry)


def resolve_class(path: str, *, where: str) -> type:
    """Return the class recorded as ``"module:QualName"``, through the alias table first.

    Args:
        path: The recorded class path.
        where: Where the path was found, for error messages.

    Raises:
        IncompatibleCheckpointError: When the class cannot be found.
    """
    if path in _ALIASES:
        return _ALIASES[path]
    module_name, sep, qualname = path.partition(":")
    if not sep or not module_name or not qualname:
        raise IncompatibleCheckpointError(
            f"{where} names the class {path!r}, which is not of the form 'module:QualName'."
        )
    if not import_allowed(module_name):
        raise IncompatibleCheckpointError(
            f"{where} names the class {path!r}, from the package {module_name.split('.', 1)[0]!r}, which this "
            "program has not imported. cairn imports only modules of packages already in use, so that a file "
            f"cannot make it import arbitrary code: import {module_name} first (cairn CLI: --import "
            f"{module_name}), or call cairn.register_class_alias({path!r}, NewClass) if the class moved."
        )
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as err:
        raise IncompatibleCheckpointError(
            f"{where} names the class {path!r}, but its module {module_name!r} cannot be "
            f"imported ({err}). If the class moved or was renamed, call "
            f"cairn.register_class_alias({path!r}, NewClass) before loading."
        ) from err
    for part in qualname.split("."):
        if part == "<locals>" or not hasattr(obj, part):
            raise IncompatibleCheckpointError(
                f"{where} names the class {path!r}, but {module_name!r} has no {qualname!r}. "
                f"If the class moved or was renamed, call "
                f"cairn.register_class_alias({path!r}, NewClass) before loading."
            )
        obj = getattr(obj, part)
    if not isinstance(obj, type):
        raise IncompatibleCheckpointError(f"{where} names {path!r}, which is not a class but {type(obj).__name__}.")
    return obj


def is_enum_member(value: Any) -> bool:
    """Return True for members of any ``enum.Enum`` subclass."""
    return isinstance(value, enum.Enum)

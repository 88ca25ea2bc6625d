"""Registries users extend (custom value types, class aliases) and the one module resolver.

Loading a checkpoint never runs code that came from the file, and never
imports a module that the file names. Every name a checkpoint gives for a class
(metadata, constructor tags, registered types, state extensions) or a module
(an environment id) goes through :func:`resolve_class` / :func:`loaded_module`
(and a function recorded by reference, through :func:`resolve_function`),
which look only at what the program registered or has already imported. Values
of custom types are rebuilt by decoders registered here, by the program.
"""

from __future__ import annotations

import dataclasses
import enum
import importlib
import os
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from types import FunctionType, ModuleType
from typing import Any, TypeVar

from cairn.errors import CheckpointError, IncompatibleCheckpointError, UnsafeCheckpointError

__all__ = [
    "AllowedModules",
    "RegisteredType",
    "class_argument_problem",
    "class_path",
    "framework_problem",
    "loaded_module",
    "register_class_alias",
    "register_type",
    "resolve_class",
    "resolve_function",
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
    """Return the registration recorded under ``name`` (or under an alias of its class), if any.

    Never imports anything: a type is found only when the program has
    registered it (by importing the module that calls :func:`register_type`)
    before the load. Importing a module a file names would run that module's
    code, chosen by whoever wrote the file.
    """
    if not isinstance(name, str):
        return None
    entry = _TYPES_BY_NAME.get(name)
    if entry is not None:
        return entry
    alias_cls = _ALIASES.get(name)
    if alias_cls is not None:
        return _TYPES_BY_CLASS.get(alias_cls)
    return None


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


MAX_PATH_LENGTH = 1000
"""The longest ``"module:QualName"`` path or module name a checkpoint may name."""


_MAIN = "it names a __main__ module, and importing one runs a program"


def _path_problem(dotted: str) -> str | None:
    """Why a dotted module or qualified name cannot name a class, or None when it can."""
    if not dotted:
        return "it is empty"
    if len(dotted) > MAX_PATH_LENGTH:
        return f"it is longer than {MAX_PATH_LENGTH} characters"
    parts = dotted.split(".")
    if "__main__" in parts:
        return _MAIN
    for part in parts:
        if not part.isidentifier():
            return f"{part[:40]!r} is not a Python identifier"
    return None


def _refusal(where: str, what: str, path: str, problem: str, fix: str) -> CheckpointError:
    """The error for a name cairn will not look up: unsafe for __main__ modules, else incompatible."""
    cls = UnsafeCheckpointError if problem == _MAIN else IncompatibleCheckpointError
    return cls(
        f"{where} names the {what} {path[:200]!r}, which cairn refuses to load: {problem}. A checkpoint may "
        f"only name classes (and functions) that are registered or that live in modules the program has already "
        f"imported. {fix}"
    )


def loaded_module(module_name: str, *, where: str, what: str = "module", hint: str = "") -> ModuleType:
    """Return the module ``module_name`` if this program has already imported it; never import it.

    This is the one place where a name read from a file (a checkpoint, a
    recorded config) is turned into a module. It only looks in
    ``sys.modules``, because importing a module runs its code: a file naming
    ``unittest.__main__`` would otherwise run a test discovery, and
    ``numpy.f2py.__main__`` would exit the program.

    Args:
        module_name: The dotted module name read from the file.
        where: Where the name was found, for error messages.
        what: What named the module (``"class 'm:C'"``, ``"environment id 'm:Env-v0'"``).
        hint: A sentence added to the error when the module is not imported.

    Raises:
        UnsafeCheckpointError: For a name with a ``__main__`` part.
        IncompatibleCheckpointError: For a name that is not dotted identifiers, or
            a module the program has not imported.
    """
    if not isinstance(module_name, str):
        raise UnsafeCheckpointError(f"{where} names a module by a {type(module_name).__name__}, not a str.")
    problem = _path_problem(module_name)
    if problem is not None:
        raise _refusal(where, what, module_name, problem, "If you trust the file, import the module yourself first.")
    module = sys.modules.get(module_name)
    if not isinstance(module, ModuleType):
        module = _cairn_own_module(module_name)
    if not isinstance(module, ModuleType):
        raise IncompatibleCheckpointError(
            f"{where} names the {what}, from the module {module_name!r}, which this program has not imported. "
            "cairn never imports a module that a file names, so that a file cannot make it run code: "
            f"import {module_name} first (cairn CLI: --import {module_name}).{' ' + hint if hint else ''}"
        )
    return module


def _cairn_own_module(module_name: str) -> ModuleType | None:
    """The module ``module_name`` imported on demand when it is one of cairn's own, else None.

    cairn's own modules are on its allow-list (SPEC 8): importing one runs only
    cairn's code, so a checkpoint of a ``PPO`` loads in a fresh process without
    ``import cairn.rl.algorithms.ppo.ppo`` first. "Own" is checked on the file,
    not the name: the module must be found inside the installed ``cairn``
    package's folders (``find_spec`` of a submodule searches only its parent
    package's ``__path__``, so a ``cairn.x`` elsewhere on ``sys.path`` is never
    found), and every parent package on the way must be cairn's too.
    """
    if not module_name.startswith("cairn."):
        return None
    import importlib.util

    try:
        spec = importlib.util.find_spec(module_name)
    except (ImportError, ValueError):  # a parent that is no package, or a name that is none
        return None
    own = sys.modules["cairn"].__path__
    origin = getattr(spec, "origin", None) if spec is not None else None
    if not isinstance(origin, str) or not any(origin.startswith(os.path.join(str(root), "")) for root in own):
        return None
    return importlib.import_module(module_name)


@dataclass(frozen=True)
class AllowedModules:
    """The modules a driver process lets its remote workers (Ray actors) import.

    A worker starts with none of the driver's modules, and a config it receives
    names some by reference (a ``"module:function"`` policy mapping, a
    ``"module:Class"`` environment). The driver resolves those names with the one
    rule (:func:`loaded_module`: registered, or already imported there before the
    load began) and sends the result, built only by :meth:`resolve`, with the
    config; the worker imports exactly these modules (:meth:`import_here`) and
    then resolves the config's names with the same resolver as the driver, which
    refuses any other module because the worker has not imported it. Classes
    (module classes, callbacks) travel as class objects, which the driver
    resolved (:func:`resolve_class`), and Ray imports their modules.

    Attributes:
        names: The dotted module names, sorted, without duplicates.
    """

    names: tuple[str, ...] = ()

    @classmethod
    def resolve(cls, refs: Iterable[tuple[str, str]]) -> AllowedModules:
        """On the driver: check each ``(module name, what names it)`` with :func:`loaded_module`.

        Raises:
            UnsafeCheckpointError: A ``__main__`` module.
            IncompatibleCheckpointError: A module this process has not imported.
        """
        names: set[str] = set()
        for name, what in refs:
            loaded_module(name, where=what, what="module")
            names.add(name)
        return cls(tuple(sorted(names)))

    def import_here(self, *, where: str) -> None:
        """On a worker: import the modules the driver resolved, and nothing else.

        Raises:
            UnsafeCheckpointError: A name that is no module path or names a ``__main__`` module.
            IncompatibleCheckpointError: A module the worker cannot import (an
                environment that differs from the driver's).
        """
        for name in self.names:
            problem = _path_problem(name) if isinstance(name, str) else "it is not a str"
            if problem is not None:
                raise UnsafeCheckpointError(f"{where}: the driver allowed the module {name!r:.200}, which {problem}.")
            if name in sys.modules:
                continue
            try:
                importlib.import_module(name)
            except Exception as err:  # an ImportError, or whatever the module's own code raised
                raise IncompatibleCheckpointError(
                    f"{where}: the module {name!r}, which the driver had imported, cannot be imported in this "
                    f"worker ({type(err).__name__}: {err}). Install it on every node of the cluster (or add its "
                    "folder to the workers' PYTHONPATH)."
                ) from err


def resolve_class(path: str, *, where: str, expected: type | None = None) -> type:
    """Return the class a checkpoint records as ``"module:QualName"``; never import anything.

    The class is found, in this order: ``expected`` when the path names exactly
    it (the caller chose that class, e.g. ``Counter.from_checkpoint(path)`` in
    a script, whose classes live in ``__main__``); the alias table
    (:func:`register_class_alias`); a module the program has already imported
    (the module itself, not just its package), looked up in the module's and
    classes' own namespaces (no ``__getattr__`` hooks, which may import).

    Args:
        path: The recorded class path.
        where: Where the path was found, for error messages.
        expected: The class the caller asked for, if any.

    Raises:
        UnsafeCheckpointError: For a path that names a ``__main__`` module or an
            exception class.
        IncompatibleCheckpointError: For a path that is not ``module:QualName`` of
            dotted identifiers, or a class that cannot be found without importing.
    """
    if not isinstance(path, str):
        raise UnsafeCheckpointError(f"{where} names a class by a {type(path).__name__}, not a str.")
    if expected is not None and class_path(expected) == path:
        return expected
    alias = _ALIASES.get(path)
    if alias is not None:
        return alias
    module_name, sep, qualname = path.partition(":")
    alias_fix = f"If the class moved or was renamed, call cairn.register_class_alias({path!r}, NewClass) first."
    problem = "it is not of the form 'module:QualName'" if not sep else _path_problem(module_name)
    if problem is None:
        problem = _path_problem(qualname)
    if problem is not None:
        fix = (
            f"If the class is yours and the file is trusted, load it with YourClass.from_checkpoint() or call "
            f"cairn.register_class_alias({path!r}, YourClass) first."
        )
        raise _refusal(where, "class", path, problem, fix)
    module = loaded_module(module_name, where=where, what=f"class {path!r}", hint=alias_fix)
    try:
        obj = _find_static(module, qualname.split("."))
    except Exception as err:  # a class namespace that misbehaves: never let it escape
        raise IncompatibleCheckpointError(
            f"{where} names the class {path!r}, which cannot be looked up ({type(err).__name__}: {err}). {alias_fix}"
        ) from err
    if obj is None:
        raise IncompatibleCheckpointError(
            f"{where} names the class {path!r}, but the module {module_name!r} has no class {qualname!r}. {alias_fix}"
        )
    if issubclass(obj, BaseException):
        raise UnsafeCheckpointError(
            f"{where} names the class {path!r}, an exception class, which cairn refuses to load: code that "
            "receives it could raise it (SystemExit, KeyboardInterrupt). Checkpoints never hold exception classes."
        )
    return obj


# Standard-library modules whose classes are plain data types: calling one with values from a file
# builds a value and does nothing else. Every other standard-library class is refused as a recorded
# constructor argument (subprocess.Popen runs a command, logging.FileHandler truncates a file, ...).
_DATA_TYPE_MODULES = frozenset(
    {"builtins", "collections", "datetime", "decimal", "enum", "fractions", "numbers", "uuid"}
)


def class_argument_problem(cls: type) -> str | None:
    """Why the class ``cls`` may not be a recorded constructor argument, or None when it may.

    Constructors that take a class call it (``ConnectorPipeline([(cls, kwargs)])``,
    RLlib's ``env`` and callbacks), with arguments from the same file. The
    standard library's classes are refused, but for its plain data types
    (:data:`_DATA_TYPE_MODULES`: ``float``, ``OrderedDict``, ``datetime``...):
    ``subprocess.Popen`` there runs a command. One rule for the save (nothing is
    recorded that a load refuses) and the load. Classes of other packages are the
    constructors' to check (a constructor calls only the base class it expects).
    """
    top = str(getattr(cls, "__module__", "") or "").partition(".")[0]
    if top in sys.stdlib_module_names and top not in _DATA_TYPE_MODULES:
        return (
            f"{class_path(cls)} is a class of the standard library that is not a plain data type, and a constructor "
            "that is given a class calls it with values from the same file (subprocess.Popen would run a command)"
        )
    return None


def function_problem(fn: Any) -> str | None:
    """Why ``fn`` cannot be recorded (and later found) by reference, or None when it can.

    The one rule, for the save side (record only what a load will accept) and
    :func:`resolve_function`: a plain Python function (not a builtin, not a
    callable object such as ``exit``, not a class), defined where its
    ``__module__``/``__qualname__`` say (not a re-export, lambda or closure),
    outside ``__main__`` and outside the standard library, whose functions
    (``code.interact``, ``os.system``, ``sys.exit``) a file must never make a program call.
    """
    if not isinstance(fn, FunctionType):
        return f"it is a {type(fn).__qualname__}, not a plain Python function"
    module = getattr(fn, "__module__", None) or ""
    qualname = getattr(fn, "__qualname__", "") or ""
    problem = _path_problem(module) or _path_problem(qualname)
    if problem is not None:
        return problem
    if module.partition(".")[0] in sys.stdlib_module_names:
        return "it is a function of the standard library, which a checkpoint may not make cairn call"
    return None


FRAMEWORK_PACKAGES = frozenset(
    {
        "cairn", "fsspec", "gym", "gymnasium", "jax", "jaxlib", "msgpack", "numpy", "pandas", "pettingzoo",
        "pyarrow", "ray", "s3fs", "safetensors", "scipy", "tensorboard", "tensorflow", "torch", "tree",
    }
)  # fmt: skip
"""Top-level packages of the frameworks a training program loads (torch, ray, numpy...). A recorded
callback (a class whose hooks run, a function called with the algorithm) may not name their
classes and functions: among their thousands, some download and run code (``torch.hub.load``),
unpickle (``numpy.load``), or start processes; a user's callbacks live in the user's own modules."""


def framework_problem(obj: Any) -> str | None:
    """Why ``obj`` (a class or function read from a file) may not be a callback, or None when it may.

    The rule for what a recorded config makes a framework call back
    (RLlib's ``callbacks_class``, ``callbacks_on_*``): a class or function of
    a module outside :data:`FRAMEWORK_PACKAGES` and outside the standard library,
    or one the program registered (:func:`register_type`, or the new class of
    :func:`register_class_alias`).
    """
    if isinstance(obj, type) and (obj in _TYPES_BY_CLASS or any(obj is cls for cls in _ALIASES.values())):
        return None
    module = str(getattr(obj, "__module__", "") or "")
    top = module.partition(".")[0]
    if top in FRAMEWORK_PACKAGES:
        return (
            f"it belongs to the package {top!r}, and a checkpoint may make cairn call back only the program's "
            "own code (a module outside the frameworks it uses) or a class the program registered"
        )
    if not top or top in sys.stdlib_module_names:
        return "it belongs to the standard library, whose classes and functions a checkpoint may not make cairn call"
    return None


_FUNCTION_HINT = "Import the module that defines it first, or pass the function itself in your config (RLlib: config=)."


def resolve_function(path: Any, *, where: str) -> Callable[..., Any]:
    """Return the function a file records as ``"module:qualname"``; never import anything.

    Used for the functions a recorded configuration holds (a policy mapping
    function, an RLlib connector factory). The module must already be imported (:func:`loaded_module`), the
    name is looked up in the module's and classes' own namespaces (no
    ``__getattr__`` hook), and the object found must pass
    :func:`function_problem` and be the function of exactly that path.

    Raises:
        UnsafeCheckpointError: For a ``__main__`` module.
        IncompatibleCheckpointError: For anything else that is not such a function.
    """
    if not isinstance(path, str):
        raise UnsafeCheckpointError(f"{where} names a function by a {type(path).__name__}, not a str.")
    module_name, sep, qualname = path.partition(":")
    problem = "it is not of the form 'module:qualname'" if not sep else _path_problem(module_name)
    if problem is None:
        problem = _path_problem(qualname)
    if problem is not None:
        raise _refusal(
            where,
            "function",
            path,
            problem,
            _FUNCTION_HINT,
        )
    module = loaded_module(module_name, where=where, what=f"function {path!r}")
    parts = qualname.split(".")
    obj: Any = vars(module).get(parts[0])
    for part in parts[1:]:
        obj = type.__dict__["__dict__"].__get__(obj).get(part) if isinstance(obj, type) else None
    if isinstance(obj, staticmethod):
        obj = obj.__func__
    problem = (
        "the module has no such function"
        if obj is None
        else function_problem(obj)
        or (None if (obj.__module__, obj.__qualname__) == (module_name, qualname) else "it is defined elsewhere")
    )
    if problem is not None:
        raise _refusal(
            where,
            "function",
            path,
            problem,
            _FUNCTION_HINT,
        )
    found: Callable[..., Any] = obj
    return found


def _find_static(module: ModuleType, parts: list[str]) -> type | None:
    """Follow ``parts`` through the module's and then each class's own ``__dict__``.

    Nested classes live in the ``__dict__`` of the class they are defined in
    (which is what ``__qualname__`` records), so no attribute hook, property or
    module ``__getattr__`` (which may import) is ever called.
    """
    obj: object = vars(module).get(parts[0])
    for part in parts[1:]:
        if not isinstance(obj, type):
            return None
        obj = type.__dict__["__dict__"].__get__(obj).get(part)
    return obj if isinstance(obj, type) else None


def is_enum_member(value: Any) -> bool:
    """Return True for members of any ``enum.Enum`` subclass."""
    return isinstance(value, enum.Enum)

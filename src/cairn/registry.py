"""Registries users extend (custom value types, class aliases, trusted names) and the one resolver.

Loading a checkpoint never runs code that came from the file, never imports a
module that the file names, and calls only what is on one allow-list (SPEC 8).
Every name a checkpoint gives for a class or function (metadata, constructor
tags, a config's connector factories, callbacks, mapping functions, module
classes) goes through :func:`resolve`, which finds it only among:

- cairn's own classes (its catalog, under the ``cairn`` package) and the
  functions cairn registered;
- what the running program registered: :func:`register` (or its decorator
  form), :func:`register_type`, :func:`register_class_alias`; building a
  config in code registers the functions and classes it was given, and saving
  an object registers its class and the enum classes of its arguments;
- what the caller passed to this load (``trusted=[...]`` on ``from_checkpoint``,
  ``restore_from_path`` and the manager; ``--trust module:name`` on the command line).

"The module is already imported" is not enough, and no deny-list decides. Each
recorded name also has a :class:`Role` whose type it must have (a connector
factory is a ``ConnectorV2`` subclass or a registered function; a callbacks
class an ``RLlibCallback`` subclass). Values of custom types are rebuilt by
decoders registered here, by the program.
"""

from __future__ import annotations

import collections
import dataclasses
import datetime
import decimal
import enum
import fractions
import importlib
import os
import sys
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from types import FunctionType, ModuleType
from typing import Any, TypeVar

from cairn._unrecorded import Unrecorded, decode_unrecorded, encode_unrecorded
from cairn.errors import CheckpointError, IncompatibleCheckpointError, UnsafeCheckpointError

__all__ = [
    "CALLBACKS_CLASS",
    "CALLBACK_FUNCTION",
    "CLASS",
    "CONNECTOR_FACTORY",
    "ENUM",
    "ENV_CLASS",
    "FUNCTION",
    "MAPPING_FUNCTION",
    "MODULE_CLASS",
    "WORKER_FUNCTION",
    "AllowedNames",
    "RegisteredType",
    "Role",
    "Trusted",
    "Unrecorded",
    "allow_lines",
    "allowed",
    "check_recorded_names",
    "class_argument_problem",
    "class_path",
    "function_problem",
    "loaded_module",
    "object_path",
    "register",
    "register_class_alias",
    "register_passed",
    "register_type",
    "resolve",
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
    # What each field holds, as given: a field behind a descriptor that reads otherwise
    # (AlgorithmConfig.rl_module_spec reads the default spec where None is held) is recorded as held.
    held = getattr(value, "__dict__", {})
    return {
        f.name: held[f.name] if f.name in held else getattr(value, f.name) for f in dataclasses.fields(value) if f.init
    }


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


def loaded_module(module_name: str, *, where: str, what: str = "module", hint: str = "") -> ModuleType:
    """Return the module ``module_name`` if this program has already imported it; never import it.

    Used only for a gymnasium id ``"some.module:Env-v0"``, which gymnasium
    would otherwise import: the id is then looked up in gymnasium's own
    registry (what the program registered). Classes and functions a file
    names go through :func:`resolve` instead.

    Raises:
        UnsafeCheckpointError: For a name with a ``__main__`` part.
        IncompatibleCheckpointError: For a name that is not dotted identifiers, or
            a module the program has not imported.
    """
    if not isinstance(module_name, str):
        raise UnsafeCheckpointError(f"{where} names a module by a {type(module_name).__name__}, not a str.")
    problem = _path_problem(module_name)
    if problem is not None:
        cls = UnsafeCheckpointError if problem == _MAIN else IncompatibleCheckpointError
        raise cls(f"{where} names the {what} {module_name[:200]!r}, which cairn refuses: {problem}.")
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


# --------------------------------------------------------------------------- the allow-list


@dataclass(frozen=True)
class Role:
    """What a recorded name is for, and the type the object it names must have.

    Attributes:
        what: The role in words, for messages (``"connector factory"``).
        bases: ``"module:Class"`` paths; a class fills the role only when it
            subclasses one of them (none: any allowed class). Looked up in
            ``sys.modules`` only: when the base's module is not imported, no
            class can be a subclass of it.
        classes: Whether a class may fill the role.
        functions: Whether a function may fill the role. Only a function the
            program registered or the caller trusted does: cairn's own functions
            are on the list only when cairn registered them.
    """

    what: str
    bases: tuple[str, ...] = ()
    classes: bool = True
    functions: bool = False

    def problem(self, obj: Any) -> str | None:
        """Why ``obj`` cannot fill this role, or None when it can."""
        if isinstance(obj, type):
            if not self.classes:
                return f"it is a class, and a {self.what} is a function"
            if issubclass(obj, BaseException):
                return "it is an exception class, which code that receives it could raise (SystemExit)"
            if not self.bases:
                return None
            found = [b for b in (_static_class(p) for p in self.bases) if b is not None]
            if any(issubclass(obj, b) for b in found):
                return None
            return f"a {self.what} is a subclass of {' or '.join(self.bases)}, and it is not"
        if isinstance(obj, FunctionType):
            return None if self.functions else f"it is a function, and a {self.what} is a class"
        return f"it is a {type(obj).__qualname__}, neither a class nor a function"


CLASS = Role("class")
"""A class recorded by a constructor argument or metadata: any class on the allow-list."""

ENUM = Role("enum class", bases=("enum:Enum",))
FUNCTION = Role("function", classes=False, functions=True)
CONNECTOR_FACTORY = Role("connector factory", bases=("cairn.rl.connectors.connector_v2:ConnectorV2",), functions=True)
CALLBACKS_CLASS = Role("callbacks class", bases=("cairn.rl.callbacks.callbacks:RLlibCallback",))
CALLBACK_FUNCTION = Role("callback function", classes=False, functions=True)
MAPPING_FUNCTION = Role("policy mapping function", classes=False, functions=True)
MODULE_CLASS = Role("module class", bases=("cairn.rl.core.rl_module.rl_module:RLModule",))
ENV_CLASS = Role("environment class", bases=("gymnasium.core:Env", "cairn.rl.env.multi_agent_env:MultiAgentEnv"))
WORKER_FUNCTION = Role("env runner function", classes=False, functions=True)


def object_path(obj: Any) -> str:
    """``"module:qualname"`` of a class or function, the name a checkpoint records it by."""
    return f"{getattr(obj, '__module__', '')}:{getattr(obj, '__qualname__', '')}"


def _nameable_problem(obj: Any) -> str | None:
    """Why ``obj`` cannot be put on the allow-list under its own path, or None when it can."""
    if not isinstance(obj, type | FunctionType):
        return f"it is a {type(obj).__qualname__}; only classes and functions are named by checkpoints"
    module, qualname = getattr(obj, "__module__", "") or "", getattr(obj, "__qualname__", "") or ""
    if "<locals>" in qualname or "<lambda>" in qualname:
        return "it is defined inside a function (or is a lambda), so no path names it"
    return _path_problem(module) or _path_problem(qualname)


_REGISTERED: dict[str, Any] = {}


def register(obj: Any = None, *, name: str | None = None) -> Any:
    """Allow checkpoints loaded by this program to name ``obj`` (a class or a function).

    Works as a plain call or as a decorator::

        cairn.register(mypkg.connectors.make_connectors)

        @cairn.register
        def map_agents(agent_id, episode, **kwargs): ...

    A checkpoint may name a class or function only when it is cairn's own,
    registered here (or with :func:`register_type` / :func:`register_class_alias`;
    building a config in code registers what it is given), or passed to the
    load as ``trusted=[...]``.

    A class or function of a script's ``__main__`` is returned unchanged and put
    on no list: no checkpoint may name ``__main__`` (SPEC 8), so there is nothing
    to allow. This lets a single-file script decorate its definitions and import
    itself under its module name (``import my_script; my_script.main()``, as the
    examples do), where the same decorators register the importable names.

    Args:
        obj: The class or function, defined at the top level of a module.
        name: Another path that old checkpoints record it by (``"oldpkg.mod:Name"``).

    Returns:
        ``obj`` itself, so that it can decorate.

    Raises:
        CheckpointError: ``obj`` is no class or function with a path (a lambda, a
            closure, a callable object).
    """

    def _register(target: Any) -> Any:
        if isinstance(target, type | FunctionType) and getattr(target, "__module__", None) == "__main__":
            return target  # nothing can name it; the script's importable copy registers itself
        problem = _nameable_problem(target)
        if problem is not None:
            raise CheckpointError(
                f"cairn.register({target!r:.80}) is refused: {problem}. Register a class or function defined at "
                "the top level of a module you import (not a script's __main__)."
            )
        _REGISTERED[object_path(target)] = target
        if name is not None:
            if _path_problem(name.partition(":")[0]) is not None or ":" not in name:
                raise CheckpointError(f"cairn.register(name={name!r:.80}) is not of the form 'module:QualName'.")
            _REGISTERED[name] = target
        return target

    if obj is None:
        return _register
    return _register(obj)


def register_passed(obj: Any) -> None:
    """Register ``obj`` when a path names it: what the program passed when it built a config in code.

    Building a config registers what the user passed for this process, so that
    saving and continuing in one process needs nothing more. Objects no path
    names (closures, ``__main__``) are left alone: a load never finds them.
    """
    if _nameable_problem(obj) is None:
        _REGISTERED[object_path(obj)] = obj


@dataclass(frozen=True)
class Trusted:
    """The classes and functions the caller of one load allows besides cairn's own and the registered.

    Keras's ``custom_objects``: ``PPO.from_checkpoint(path, trusted=[MyModule, map_fn])``.
    A name a load resolves through it stays allowed in this process, as if the
    program had registered it, because the object the load built resolves its
    config's names again later (an env runner rebuilt, a module added, Ray workers).

    Attributes:
        objects: ``"module:qualname"`` -> the object.
    """

    objects: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    @classmethod
    def of(cls, trusted: Trusted | Iterable[Any] | None) -> Trusted:
        """``trusted`` as given to a load: None, a :class:`Trusted`, or classes and functions.

        Raises:
            CheckpointError: An entry is no class or function with a path.
        """
        if trusted is None:
            return _NO_TRUST
        if isinstance(trusted, Trusted):
            return trusted
        if isinstance(trusted, str | bytes) or not isinstance(trusted, Iterable):
            raise CheckpointError(f"trusted= takes a list of classes and functions, got {trusted!r:.80}.")
        objects: dict[str, Any] = {}
        for obj in trusted:
            problem = _nameable_problem(obj)
            if problem is not None:
                raise CheckpointError(
                    f"trusted=[{obj!r:.80}] is refused: {problem}. Pass classes and functions defined at the "
                    "top level of a module you import."
                )
            objects[object_path(obj)] = obj
        return cls(objects)

    @classmethod
    def from_names(cls, names: Iterable[str]) -> Trusted:
        """The objects the command line's ``--trust module:name`` name; imports each module (the user named it).

        Raises:
            CheckpointError: A name is not ``module:qualname``, its module cannot be
                imported, or it names no class or function.
        """
        objects: list[Any] = []
        for name in names:
            module_name, sep, qualname = str(name).partition(":")
            problem = "it is not of the form 'module:name'" if not sep else _path_problem(module_name)
            problem = problem or _path_problem(qualname)
            if problem is not None:
                raise CheckpointError(f"--trust {name!r:.200} is refused: {problem}.")
            try:
                module = importlib.import_module(module_name)
            except Exception as err:  # ImportError, or what the module's code raised
                raise CheckpointError(
                    f"--trust {name}: the module {module_name!r} cannot be imported ({type(err).__name__}: {err})."
                ) from err
            obj = _find_object(module, qualname.split("."))
            if obj is None:
                raise CheckpointError(
                    f"--trust {name}: the module {module_name!r} has no class or function {qualname!r}."
                )
            objects.append(obj)
        return cls.of(objects)


_NO_TRUST = Trusted()

# Plain data types a constructor argument may name: calling one with values from a file builds a
# value and does nothing else.
_DATA_TYPES: dict[str, type] = {
    object_path(t): t
    for t in (
        bool, int, float, complex, str, bytes, bytearray, list, tuple, dict, set, frozenset,
        collections.OrderedDict, collections.defaultdict, collections.deque, collections.Counter,
        datetime.date, datetime.datetime, datetime.time, datetime.timedelta,
        decimal.Decimal, fractions.Fraction, uuid.UUID,
    )
}  # fmt: skip


def _cairn_own(path: str) -> Any:
    """A class of cairn's own package that ``path`` names (looked up statically; its module imported on demand
    when it is a file of cairn's package, :func:`_cairn_own_module`), or None."""
    module_name, _, qualname = path.partition(":")
    if module_name != "cairn" and not module_name.startswith("cairn."):
        return None
    module = sys.modules.get(module_name) or _cairn_own_module(module_name)
    if not isinstance(module, ModuleType):
        return None
    try:
        obj = _find_object(module, qualname.split("."))
    except Exception:  # a namespace that misbehaves: not found
        return None
    # Only classes (the catalog, each checked against its role); cairn's functions only when registered.
    return obj if isinstance(obj, type) and object_path(obj) == path else None


def _program_allowed(path: str) -> Any:
    """What the program allows under ``path`` (registered, an alias, a registered type, cairn's own), or None."""
    found = _REGISTERED.get(path) or _ALIASES.get(path) or _DATA_TYPES.get(path)
    if found is None:
        entry = _TYPES_BY_NAME.get(path)
        found = entry.cls if entry is not None else _cairn_own(path)
    return found


def allow_lines(path: str) -> str:
    """The lines that allow ``path``, for messages: ``cairn.register(...)``, ``trusted=[...]``, ``--trust ...``."""
    module_name, _, qualname = path.partition(":")
    dotted = f"{module_name}.{qualname}" if module_name else qualname
    short = qualname.rpartition(".")[2] or qualname
    return (
        f"If you trust it, allow it: call cairn.register({dotted}) in your program before loading, or pass "
        f"trusted=[{short}] to this load (cairn CLI: --trust {path})"
    )


def allowed(path: Any, role: Role) -> Any:
    """What the program allows under ``path`` in ``role``, or None; never raises (for names of two kinds,
    such as an env that is a ``"module:Class"`` or else a gymnasium id)."""
    if not isinstance(path, str) or ":" not in path:
        return None
    obj = _program_allowed(path)
    return obj if obj is not None and role.problem(obj) is None else None


def resolve(path: Any, *, where: str, role: Role, trusted: Trusted | None = None, expected: Any = None) -> Any:
    """The class or function ``path`` (``"module:qualname"``, read from a file) names, if it is allowed in ``role``.

    The one resolver (SPEC 8). It never imports anything and never calls a
    hook (``__getattr__``, properties): names are looked up in the allow-list
    (see the module docstring), and ``expected`` (the class the caller asked
    for, ``Counter.from_checkpoint(path)``) is taken when the path names exactly
    it. A name ``trusted`` allowed stays allowed in this process.

    Args:
        path: The recorded name.
        where: The field (file and key) that recorded it, for the message.
        role: What the name is for; the object must have its type.
        trusted: What the caller of this load allows.
        expected: The class the caller chose, if any.

    Raises:
        UnsafeCheckpointError: The name is not on the allow-list, names a ``__main__``
            module or an exception class, or does not fill ``role``. The message names
            the field, the name, and the line that allows it.
    """
    if isinstance(path, Unrecorded):
        # A callable no path names (a lambda): the program's own, given to a config in code or passed to
        # this load by role; never one a file chose (a record read from a file holds only names).
        return path.live(where)
    if not isinstance(path, str):
        raise UnsafeCheckpointError(f"{where} names a {role.what} by a {type(path).__name__}, not a str.")
    if expected is not None and object_path(expected) == path and role.problem(expected) is None:
        return expected  # the caller chose it, even from a script's __main__
    module_name, sep, qualname = path.partition(":")
    problem = "it is not of the form 'module:qualname'" if not sep else _path_problem(module_name)
    problem = problem or _path_problem(qualname)
    if problem is not None:
        raise UnsafeCheckpointError(f"{where} names the {role.what} {path[:200]!r}, which cairn refuses: {problem}.")
    from_trust = False
    obj = _program_allowed(path)
    if obj is None:
        obj = (trusted or _NO_TRUST).objects.get(path)
        from_trust = obj is not None
    if obj is None:
        raise UnsafeCheckpointError(
            f"{where} names the {role.what} {path!r}, which is not on cairn's allow-list: a checkpoint may name only "
            "cairn's own classes, what this program registered, and what the caller passed as trusted= (that the "
            f"module is imported is not enough). {allow_lines(path)}. If the class moved or was renamed: "
            f"cairn.register_class_alias({path[:200]!r}, NewClass)."
        )
    problem = role.problem(obj)
    if problem is not None:
        raise UnsafeCheckpointError(f"{where} names the {role.what} {path!r}, which cairn refuses: {problem}.")
    if from_trust:
        _REGISTERED[path] = obj  # the built object resolves it again (env runners rebuilt, Ray workers)
    return obj


def resolve_class(
    path: Any, *, where: str, expected: type | None = None, trusted: Trusted | None = None, role: Role = CLASS
) -> type:
    """:func:`resolve` for a class (``role`` must take classes)."""
    obj = resolve(path, where=where, role=role, trusted=trusted, expected=expected)
    if not isinstance(obj, type):
        raise UnsafeCheckpointError(f"{where} names {path!r}, which is not a class.")
    return obj


def resolve_function(
    path: Any, *, where: str, trusted: Trusted | None = None, role: Role = FUNCTION
) -> Callable[..., Any]:
    """:func:`resolve` for a function (``role`` must take functions)."""
    obj = resolve(path, where=where, role=role, trusted=trusted)
    if isinstance(path, Unrecorded):
        live: Callable[..., Any] = obj  # the program's own callable (a lambda, a bound method, a callable object)
        return live
    if not isinstance(obj, FunctionType):
        raise UnsafeCheckpointError(f"{where} names {path!r}, which is not a function.")
    found: Callable[..., Any] = obj
    return found


def check_recorded_names(
    cls: type, args: tuple[Any, ...], kwargs: Mapping[str, Any], *, trusted: Trusted | None, where: str
) -> None:
    """Resolve, before ``cls`` is built, every name its recorded constructor arguments give by reference.

    A class whose arguments name classes or functions as strings (an algorithm's
    config: connector factories, callbacks, a policy mapping function) defines the
    classmethod hook::

        @classmethod
        def recorded_names(cls, args: tuple, kwargs: dict) -> Iterable[tuple[str, str, Role]]:
            ...  # (field, "module:qualname", role) of every name the arguments give

    Each one goes through :func:`resolve` with ``trusted``; the engine calls this once
    per component it builds, after decoding its arguments and before calling the class.

    Raises:
        UnsafeCheckpointError: A name that is not on the allow-list or does not fill its role.
    """
    hook = getattr(cls, "recorded_names", None)
    if hook is None:
        return
    try:
        names = list(hook(tuple(args), dict(kwargs)))
    except CheckpointError:
        raise
    except Exception as err:  # a hook that misbehaves on hostile values: never let it escape
        raise UnsafeCheckpointError(
            f"{where}: listing the names the constructor arguments of {cls.__qualname__} give failed "
            f"({type(err).__name__}: {err}); they are corrupt or hostile."
        ) from err
    for field, path, role in names:
        resolve(path, where=f"{where}, {field}", role=role, trusted=trusted)


def class_argument_problem(cls: type) -> str | None:
    """Why the class ``cls`` may not be recorded as a constructor argument, or None (and it is registered).

    The save side of the allow-list: the program passed ``cls`` to a constructor
    it saves, so recording it registers it (:func:`register`), and a load in this
    program accepts it. Refused: what no path names (closures, ``__main__``) and
    the standard library's classes but its plain data types (``subprocess.Popen``
    is no value to record).
    """
    if _program_allowed(object_path(cls)) is cls or cls.__module__ == "__main__":
        return None  # a script's class is recorded, and only the caller's from_checkpoint(cls) loads it
    problem = _nameable_problem(cls)
    if problem is None and str(cls.__module__).partition(".")[0] in sys.stdlib_module_names:
        problem = f"{object_path(cls)} is a class of the standard library that is not a plain data type"
    if problem is not None:
        return problem
    _REGISTERED[object_path(cls)] = cls
    return None


def function_problem(fn: Any) -> str | None:
    """Why ``fn`` cannot be recorded (and later found) by reference, or None when it can.

    The save side: a plain Python function (not a builtin, not a callable
    object, not a class), defined where its ``__module__``/``__qualname__`` say
    (not a lambda or closure), outside ``__main__`` and the standard library.
    Recording it also registers it (:func:`register`): the program passed it.
    """
    if not isinstance(fn, FunctionType):
        return f"it is a {type(fn).__qualname__}, not a plain Python function"
    problem = _nameable_problem(fn)
    if problem is not None:
        return problem
    if (fn.__module__ or "").partition(".")[0] in sys.stdlib_module_names:
        return "it is a function of the standard library, which a checkpoint may not make cairn call"
    return None


@dataclass(frozen=True)
class AllowedNames:
    """The names a driver process lets its remote workers (Ray actors) resolve: what the driver resolved.

    A worker starts with none of the driver's registrations, and a config it
    receives names some by reference (a policy mapping function, a connector
    factory, callbacks). The driver resolves every such name with :func:`resolve`
    and sends the result, built only by :meth:`resolve`; the worker imports the
    modules of exactly these names and registers exactly these objects
    (:meth:`import_here`), then resolves the config's names with the same
    resolver, which refuses any other name.

    Attributes:
        names: ``"module:qualname"`` paths, sorted, without duplicates.
        modules: Modules of gymnasium ids (``"mymod:Env-v0"``) the driver had imported
            (:func:`loaded_module`), which register their environments with gymnasium.
    """

    names: tuple[str, ...] = ()
    modules: tuple[str, ...] = ()

    @classmethod
    def resolve(
        cls, refs: Iterable[tuple[str | Unrecorded, str, Role]], *, modules: Iterable[str] = ()
    ) -> AllowedNames:
        """On the driver: resolve each ``(path, field, role)`` with :func:`resolve`.

        Raises:
            UnsafeCheckpointError: A name the driver does not allow in its role.
            IncompatibleCheckpointError: A module the driver has not imported.
        """
        names: set[str] = set()
        for path, where, role in refs:
            if isinstance(path, Unrecorded):
                continue  # no name: the worker gets the callable itself with the config (Ray's cloudpickle)
            obj = resolve(path, where=where, role=role)
            names.add(path)
            names.add(object_path(obj))
        mods = {loaded_module(m, where="an environment id").__name__ for m in modules}
        return cls(tuple(sorted(names)), tuple(sorted(mods)))

    def import_here(self, *, where: str) -> None:
        """On a worker: import the modules of the driver's names and register those objects, nothing else.

        Raises:
            UnsafeCheckpointError: A name that is no path or names a ``__main__`` module.
            IncompatibleCheckpointError: A module the worker cannot import (an
                environment that differs from the driver's).
        """
        for name in [f"{m}:" for m in self.modules] + list(self.names):
            module_name, _, qualname = name.partition(":") if isinstance(name, str) else ("", "", "")
            problem = _path_problem(module_name)
            if problem is None and not qualname:  # a gymnasium id's module: import it, nothing to register
                try:
                    importlib.import_module(module_name)
                except Exception as err:
                    raise IncompatibleCheckpointError(
                        f"{where}: the module {module_name!r} cannot be imported in this worker "
                        f"({type(err).__name__}: {err}). Install it on every node of the cluster."
                    ) from err
                continue
            problem = _path_problem(module_name) or _path_problem(qualname)
            if problem is not None:
                raise UnsafeCheckpointError(f"{where}: the driver allowed the name {name!r:.200}, which {problem}.")
            try:
                module = importlib.import_module(module_name)
            except Exception as err:  # an ImportError, or whatever the module's own code raised
                raise IncompatibleCheckpointError(
                    f"{where}: the module {module_name!r}, which the driver had imported, cannot be imported in "
                    f"this worker ({type(err).__name__}: {err}). Install it on every node of the cluster (or add "
                    "its folder to the workers' PYTHONPATH)."
                ) from err
            obj = _find_object(module, qualname.split("."))
            if obj is not None and _nameable_problem(obj) is None:
                _REGISTERED[name] = obj


def _find_object(module: ModuleType, parts: list[str]) -> Any:
    """The class or function at ``parts`` in the module's and then each class's own ``__dict__``, or None."""
    obj: Any = vars(module).get(parts[0])
    for part in parts[1:]:
        if not isinstance(obj, type):
            return None
        obj = type.__dict__["__dict__"].__get__(obj).get(part)
    if isinstance(obj, staticmethod):
        obj = obj.__func__
    return obj if isinstance(obj, type | FunctionType) else None


def _static_class(path: str) -> type | None:
    """The class ``path`` names in an already imported module, or None (for role bases; never imports)."""
    module_name, _, qualname = path.partition(":")
    module = sys.modules.get(module_name)
    if not isinstance(module, ModuleType):
        return None
    obj = _find_object(module, qualname.split("."))
    return obj if isinstance(obj, type) else None


register_type(Unrecorded, name="cairn.registry:Unrecorded", encode=encode_unrecorded, decode=decode_unrecorded)


def is_enum_member(value: Any) -> bool:
    """Return True for members of any ``enum.Enum`` subclass."""
    return isinstance(value, enum.Enum)

"""Callables a config holds but no checkpoint can record, and how a load asks for them again (issue 39).

RLlib users pass lambdas, closures, bound methods, functions of their script
(``__main__``) and callable objects wherever RLlib takes a callable
(``policy_mapping_fn``, connector factories, ``callbacks(on_episode_end=...)``).
A checkpoint never records code (SPEC 8), and no path names such a callable, so
a config keeps it as an :class:`Unrecorded`: in the program that built the
config it holds the callable and works as RLlib's does (Ray workers get it with
the config, through Ray's own cloudpickle channel, from the driver). A checkpoint
records only that it exists: its role (the config field), and its module and
``__qualname__`` for the message. Read back from a file, it holds what the
caller passed for that role to this load (:func:`supplying`), or nothing; a
config holding nothing for a role refuses to build an algorithm with one
:class:`~cairn.errors.MissingCallableError` naming every such role and the line
that passes it (:func:`missing_message`).

A file decides nothing here: the record's strings are only shown in messages,
and the callable, if any, is always the caller's own.

A leaf module (it imports only :mod:`cairn.errors`), so that the registry's one
resolver can give back a live callable.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from cairn.errors import MissingCallableError

__all__ = [
    "MAX_INDEX",
    "SCOPE",
    "Unrecorded",
    "decode_unrecorded",
    "encode_unrecorded",
    "missing_message",
    "supplied",
    "supplying",
    "unrecorded",
]

MAX_NAME = 200
"""Longest module or qualname a record keeps (longer ones are cut: they are only shown)."""

MAX_ROLE = 500
"""Longest role a record may give: a field inside a module's overrides (a module id is at most 200)."""

SCOPE = "/"
"""Joins the keys of a role inside a dict field: ``"evaluation_config/policy_mapping_fn"``,
``"algorithm_config_overrides_per_module/p0/env_to_module_connector"`` (no field name or module id
holds a ``/``)."""

MAX_INDEX = 10_000
"""Largest position in a list of callables (a hook's functions) a record may give."""

_SUPPLIED: contextvars.ContextVar[Mapping[str, Any] | None] = contextvars.ContextVar(
    "cairn_supplied_callables", default=None
)


@dataclass(frozen=True, eq=False)
class Unrecorded:
    """A callable a config holds that a checkpoint records only as "it existed".

    Attributes:
        role: The config field it fills (``"policy_mapping_fn"``, ``"env_to_module_connector"``,
            ``"callbacks_on_episode_end"``); the keyword that passes it back to a load.
        module: The callable's ``__module__``, for messages.
        qualname: The callable's ``__qualname__`` (``"main.<locals>.<lambda>"``), for messages.
        index: Its position when the field holds a list (a hook's functions), else None.
        fn: The callable itself, in the program that has it; None when read from a
            checkpoint and the load was not given one for the role.
    """

    role: str
    module: str
    qualname: str
    index: int | None = None
    fn: Callable[..., Any] | None = field(default=None, repr=False)

    def _key(self) -> tuple[str, str, str, int | None]:
        return (self.role, self.module, self.qualname, self.index)

    def __eq__(self, other: object) -> bool:
        # Equal records: a config read back from a checkpoint equals the one saved.
        return self._key() == other._key() if isinstance(other, Unrecorded) else NotImplemented

    def __hash__(self) -> int:
        return hash(self._key())

    @property
    def path(self) -> list[str]:
        """The role's keys, outermost first: ``["evaluation_config", "policy_mapping_fn"]``."""
        return self.role.split(SCOPE)

    @property
    def field_name(self) -> str:
        """The role with its position: ``callbacks_on_episode_end[1]``, ``evaluation_config['env']``."""
        first, *inner = self.path
        name = first + "".join(f"[{key!r}]" for key in inner)
        return name if self.index is None else f"{name}[{self.index}]"

    def live(self, where: str = "") -> Callable[..., Any]:
        """The callable; raises :class:`~cairn.errors.MissingCallableError` when this program lacks it."""
        if self.fn is None:
            raise MissingCallableError(missing_message([self], where=where or "This config"))
        return self.fn

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the callable (RLlib code calls ``config.policy_mapping_fn(agent_id, episode)`` itself)."""
        return self.live()(*args, **kwargs)


def unrecorded(fn: Callable[..., Any], role: str, index: int | None = None) -> Unrecorded:
    """Keep ``fn`` (a callable no path names) for ``role``, with its names for messages."""
    target = getattr(fn, "__func__", fn)  # a bound method: its function's names
    module = getattr(target, "__module__", None) or type(fn).__module__
    qualname = getattr(target, "__qualname__", None) or type(fn).__qualname__
    return Unrecorded(role, str(module)[:MAX_NAME], str(qualname)[:MAX_NAME], index, fn)


@contextlib.contextmanager
def supplying(given: Mapping[str, Any]) -> Iterator[None]:
    """Within the block, records read from a checkpoint take the callables ``given`` by role.

    ``given`` maps a role to a callable, or to a list of them for a role that
    holds a list (a hook's functions, in the order the config was given them);
    a scoped role's callable sits in nested dicts, as in the config
    (``{"evaluation_config": {"env": creator}}``).
    """
    token = _SUPPLIED.set(dict(given))
    try:
        yield
    finally:
        _SUPPLIED.reset(token)


def supplied(role: str, index: int | None) -> Callable[..., Any] | None:
    """The callable the caller of the running load passed for ``role`` (at ``index``), or None.

    A scoped role is looked up in the caller's nested dicts:
    ``evaluation_config={"policy_mapping_fn": fn}`` for ``"evaluation_config/policy_mapping_fn"``.
    """
    value: Any = _SUPPLIED.get() or {}
    for key in role.split(SCOPE):  # a scoped role: the caller nests it as the config does
        value = value.get(key) if isinstance(value, Mapping) else None
    if isinstance(value, list | tuple):
        value = value[index] if index is not None and 0 <= index < len(value) else None
    return value if callable(value) else None


def decode_unrecorded(value: Any) -> Unrecorded:
    """Rebuild a record read from a file: its names, and the callable the caller supplied or None.

    Raises:
        ValueError: The record is not ``{"role", "module", "qualname", "index"}`` of short strings.
    """
    if not isinstance(value, Mapping) or set(value) - {"role", "module", "qualname", "index"}:
        raise ValueError("expected {'role': str, 'module': str, 'qualname': str, 'index': int | None}")
    role, module, qualname, index = (value.get(k) for k in ("role", "module", "qualname", "index"))
    if not all(isinstance(s, str) and len(s) <= MAX_NAME for s in (module, qualname)) or not role:
        raise ValueError(f"module and qualname must be strings of at most {MAX_NAME} characters, role non-empty")
    if not isinstance(role, str) or len(role) > MAX_ROLE:
        raise ValueError(f"role must be a string of at most {MAX_ROLE} characters")
    if index is not None and (type(index) is not int or not 0 <= index <= MAX_INDEX):
        raise ValueError(f"index must be None or an int from 0 to {MAX_INDEX}")
    assert isinstance(role, str) and isinstance(module, str) and isinstance(qualname, str)  # checked above
    return Unrecorded(role, module, qualname, index, supplied(role, index))


def encode_unrecorded(value: Unrecorded) -> dict[str, Any]:
    """What a checkpoint records: the names, never the callable."""
    return {"role": value.role, "module": value.module, "qualname": value.qualname, "index": value.index}


def missing_message(
    missing: list[Unrecorded], *, where: str, load: str = "from_checkpoint", notes: Mapping[str, str] | None = None
) -> str:
    """One message naming each missing callable and the line that passes them all back.

    ``notes`` adds a word to some of them, by :attr:`Unrecorded.field_name`
    (the env a creator was registered under).
    """
    notes = notes or {}
    described = "; ".join(
        f"{m.field_name}: {m.qualname!r} of module {m.module!r}{notes.get(m.field_name, '')}" for m in missing
    )
    passes: dict[str, Any] = {}
    for m in missing:
        *outer, last = m.path
        into = passes
        for key in outer:
            inner = into.get(key)
            if not isinstance(inner, dict):  # a forged record may name a role inside another role
                inner = into[key] = {}
            into = inner
        into[last] = (
            f"<your {'env creator' if last == 'env' else last}>"
            if m.index is None
            else f"[<the functions of {last}, in the order the config was given them>]"
        )
    return (
        f"{where} was saved with {len(missing)} callable(s) that a checkpoint cannot record (lambdas, closures, "
        f"bound methods, functions of a script: cairn never records code), and this program has not passed them "
        f"again: {described}. Pass them to the load: {load}(path, "
        f"{', '.join(f'{key}={_shown(value)}' for key, value in passes.items())}), or pass your own "
        "config that holds them: from_checkpoint(path, config=config). (A function defined at the top level of a "
        "module you import is recorded by reference and needs nothing.)"
    )


def _shown(value: Any) -> str:
    """A pass-line value: the placeholder itself, or a nested dict of them written as Python."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{key!r}: {_shown(inner)}" for key, inner in value.items()) + "}"
    return str(value)

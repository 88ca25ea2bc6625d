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
    "Unrecorded",
    "decode_unrecorded",
    "encode_unrecorded",
    "missing_message",
    "supplied",
    "supplying",
    "unrecorded",
]

MAX_NAME = 200
"""Longest role, module or qualname a record keeps (longer ones are cut: they are only shown)."""

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
    def field_name(self) -> str:
        """The role with its position: ``callbacks_on_episode_end[1]``."""
        return self.role if self.index is None else f"{self.role}[{self.index}]"

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
    holds a list (a hook's functions, in the order the config was given them).
    """
    token = _SUPPLIED.set(dict(given))
    try:
        yield
    finally:
        _SUPPLIED.reset(token)


def supplied(role: str, index: int | None) -> Callable[..., Any] | None:
    """The callable the caller of the running load passed for ``role`` (at ``index``), or None."""
    value = (_SUPPLIED.get() or {}).get(role)
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
    if not all(isinstance(s, str) and len(s) <= MAX_NAME for s in (role, module, qualname)) or not role:
        raise ValueError(f"role, module and qualname must be strings of at most {MAX_NAME} characters")
    if index is not None and (type(index) is not int or not 0 <= index <= MAX_INDEX):
        raise ValueError(f"index must be None or an int from 0 to {MAX_INDEX}")
    assert isinstance(role, str) and isinstance(module, str) and isinstance(qualname, str)  # checked above
    return Unrecorded(role, module, qualname, index, supplied(role, index))


def encode_unrecorded(value: Unrecorded) -> dict[str, Any]:
    """What a checkpoint records: the names, never the callable."""
    return {"role": value.role, "module": value.module, "qualname": value.qualname, "index": value.index}


def missing_message(missing: list[Unrecorded], *, where: str, load: str = "from_checkpoint") -> str:
    """One message naming each missing callable and the line that passes them all back."""
    described = "; ".join(f"{m.field_name}: {m.qualname!r} of module {m.module!r}" for m in missing)
    passes: dict[str, str] = {}
    for m in missing:
        passes[m.role] = (
            f"{m.role}=<your {m.role}>"
            if m.index is None
            else f"{m.role}=[<the functions of {m.role}, in the order the config was given them>]"
        )
    return (
        f"{where} was saved with {len(missing)} callable(s) that a checkpoint cannot record (lambdas, closures, "
        f"bound methods, functions of a script: cairn never records code), and this program has not passed them "
        f"again: {described}. Pass them to the load: {load}(path, {', '.join(passes.values())}), or pass your own "
        "config that holds them: from_checkpoint(path, config=config). (A function defined at the top level of a "
        "module you import is recorded by reference and needs nothing.)"
    )

"""Checks of restored state: a hostile or damaged checkpoint gets a clear error, before anything changes.

Every byte of a checkpoint is verified, but whoever writes one can recompute the digests, and an
older writer with a bug writes a "damaged" state that verifies. A component's ``check_state``
(and a ``set_state`` that checks before it applies) reads its values with these helpers: a value
that does not hold together raises :class:`~cairn.errors.CorruptCheckpointError` naming its path
in the checkpoint and what to do, never a raw ``KeyError`` or a numpy error later.

The one home of these checks, below every component that restores state (``rl/``, ``cairn.torch``);
``import cairn`` does not import it (it needs numpy).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias

import numpy as np

from cairn._restore import LoadedFolder, check_loaded
from cairn._tree import ComponentNode
from cairn.checkpointable import Checkpointable
from cairn.errors import CorruptCheckpointError, IncompatibleCheckpointError

__all__ = [
    "ALTERED",
    "ArrayField",
    "ById",
    "Count",
    "Field",
    "ListOf",
    "Number",
    "Schema",
    "check_state_tree",
    "corrupt",
    "count",
    "counts_by_id",
    "mapping",
    "number",
    "numeric_leaves",
    "unique",
]

ALTERED = (
    "The checkpoint was written by other code, damaged, or altered after it was written; restore another "
    "checkpoint. Nothing was changed."
)
"""The end of every refusal here: what happened and what to do."""


def corrupt(where: str, problem: str) -> CorruptCheckpointError:
    """The error for a state at ``where`` (a component path) that does not hold together."""
    return CorruptCheckpointError(f"{where}: {problem}. {ALTERED}")


@dataclass(frozen=True)
class Count:
    """A counter, episode number or size: an int from ``low`` to ``high`` (numpy ints too; no bool, float or str).

    Declared in a :class:`Schema` as ``Count(high=MAX_PREV)``; :data:`count` is ``Count()``.
    """

    low: int = 0
    high: int | None = None

    def fits(self, value: Any) -> bool:
        """Whether ``value`` is such an int (for a check that reports in its own words)."""
        if isinstance(value, bool) or not isinstance(value, int | np.integer):
            return False
        return bool(self.low <= value and (self.high is None or value <= self.high))

    @property
    def wanted(self) -> str:
        """What fits, in words: ``"a non-negative int"``, ``"an int >= 1"``, ``"an int from 1 to 8"``."""
        if self.high is not None:
            return f"an int from {self.low} to {self.high}"
        return "a non-negative int" if self.low == 0 else f"an int >= {self.low}"

    def __call__(self, value: Any, *, where: str) -> int:
        """``value`` as an int.

        Raises:
            CorruptCheckpointError: Anything else, or an int out of range.
        """
        if not self.fits(value):
            raise corrupt(where, f"a count must be {self.wanted}, the checkpoint holds {value!r:.60}")
        return int(value)

    def setting(self, value: Any, *, name: str) -> int:
        """``value`` as an int, for a setting given in code or read from a recorded config.

        Raises:
            ValueError: Anything else, or an int out of range (naming ``name`` and what fits).
        """
        if not self.fits(value):
            raise ValueError(f"{name} must be {self.wanted}, got {value!r:.40}.")
        return int(value)


count = Count()
"""A non-negative int (:class:`Count` with no upper bound)."""


@dataclass(frozen=True)
class Number:
    """A real number (a return, a value estimate, a coefficient): Python or numpy, a 0-d array too.

    Declared in a :class:`Schema` as ``Number(low=0, finite=True)``; :data:`number` is ``Number()``,
    which lets NaN and infinities pass, as a save records them. A NaN is within no bound.
    """

    low: float | None = None
    high: float | None = None
    finite: bool = False

    def __call__(self, value: Any, *, where: str) -> float:
        """``value`` as a float.

        Raises:
            CorruptCheckpointError: A str, bool, container or complex number; a value out of its bounds.
        """
        if isinstance(value, np.ndarray) and value.ndim == 0:
            value = value[()]
        if isinstance(value, bool | np.bool_) or not isinstance(value, int | float | np.integer | np.floating):
            raise corrupt(where, f"expected a number, the checkpoint holds {type(value).__name__} {value!r:.60}")
        out = float(value)
        bounded = self.low is not None or self.high is not None
        if (self.finite and not math.isfinite(out)) or (bounded and math.isnan(out)):
            raise corrupt(where, f"expected a finite number, the checkpoint holds {out!r}")
        if (self.low is not None and out < self.low) or (self.high is not None and out > self.high):
            bounds = [f">= {self.low}"] * (self.low is not None) + [f"<= {self.high}"] * (self.high is not None)
            raise corrupt(where, f"expected a number {' and '.join(bounds)}, the checkpoint holds {out!r}")
        return out


number = Number()
"""A real number; NaN and infinities pass (:class:`Number` with no bounds)."""


def mapping(value: Any, *, where: str) -> Mapping[Any, Any]:
    """``value`` when it is a dict.

    Raises:
        CorruptCheckpointError: It is not.
    """
    if not isinstance(value, Mapping):
        raise corrupt(where, f"expected a dict, the checkpoint holds a {type(value).__name__}")
    return value


def check_state_tree(obj: Checkpointable, state: Mapping[str, Any], *, where: str) -> None:
    """Let ``obj`` and each of its components refuse its part of a whole ``state``, before anything changes.

    For a state handed to ``set_state`` directly (a remote runner's own state, a state from
    ``get_state``), so that it too changes nothing when refused. What a restore knows from its
    folders, this knows from the state's keys: which ones are components' states. The checks
    themselves are the engine's one walk (``_restore.check_loaded``), as for a restore.

    Raises:
        CheckpointError: A component refused its state, or a component's state is no dict.
    """
    node = ComponentNode(obj, where)
    check_loaded(node, _as_loaded(node, state))


def _as_loaded(node: ComponentNode, state: Mapping[str, Any]) -> LoadedFolder:
    """``state`` split as a restore reads it: the object's own keys, and a folder per component it holds."""
    components = node.children
    children: dict[str, LoadedFolder] = {}
    for name, child in components.items():
        if name not in state:
            continue
        sub = state[name]
        if not isinstance(sub, Mapping):
            raise corrupt(child.path, f"expected a component's state (a dict), found a {type(sub).__name__}")
        children[name] = _as_loaded(child, sub)
    own = {key: value for key, value in state.items() if key not in components}
    return LoadedFolder(own, children, type(node.obj).STATE_VERSION)


def unique(items: Sequence[Any], *, where: str) -> None:
    """Refuse duplicates (keys compared with their types: ``1`` and ``"1"`` differ).

    Raises:
        CorruptCheckpointError: An item appears twice.
    """
    seen: set[tuple[type, Any]] = set()
    for item in items:
        key = (type(item), item)
        if key in seen:
            raise corrupt(where, f"lists {item!r:.60} twice")
        seen.add(key)


def numeric_leaves(value: Any) -> bool:
    """Whether every leaf of a saved batch (arrays, dicts and lists of them) is an array of numbers."""
    if isinstance(value, Mapping):
        return all(numeric_leaves(v) for v in value.values())
    if isinstance(value, list | tuple):
        return all(numeric_leaves(v) for v in value)
    return isinstance(value, np.ndarray) and value.dtype.kind in "biuf"


@dataclass(frozen=True)
class ById:
    """A dict of str ids (module ids) -> values, each read by ``check`` (a :data:`Field` function).

    Declared in a :class:`Schema` as ``ById(Number(low=0))``; :data:`counts_by_id` is ``ById(count)``.
    """

    check: Callable[..., Any]

    def __call__(self, value: Any, *, where: str) -> dict[str, Any]:
        """The dict, each value read by ``check``.

        Raises:
            CorruptCheckpointError: Not a dict of str keys, or a value its check refuses.
        """
        if not isinstance(value, Mapping):
            raise corrupt(where, f"expected a dict of module id -> value, found {type(value).__name__}")
        out: dict[str, Any] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise corrupt(where, f"module ids are str, the checkpoint holds {key!r:.60}")
            out[key] = self.check(item, where=f"{where}/{key}")
        return out


counts_by_id = ById(count)
"""A dict of str ids (module ids) -> counts."""


@dataclass(frozen=True)
class ListOf:
    """A list (a tuple, or a 1-d array) of values, each read by ``check``: a window of returns, episode numbers.

    Declared in a :class:`Schema` as ``ListOf(number)`` or ``ById(ListOf(count))``.
    """

    check: Callable[..., Any]

    def __call__(self, value: Any, *, where: str) -> list[Any]:
        """The values, each read by ``check``.

        Raises:
            CorruptCheckpointError: No list, or a value its check refuses.
        """
        if isinstance(value, np.ndarray) and value.ndim == 1:
            value = value.tolist()
        if not isinstance(value, list | tuple):
            raise corrupt(where, f"expected a list, found a {type(value).__name__}")
        return [self.check(item, where=f"{where}/{i}") for i, item in enumerate(value)]


Dim = int | str | None
"""One dimension of an :class:`ArrayField`'s shape: a size, the name of a key read before it in the same
:class:`Schema` (the length of that value), or None (any size)."""


@dataclass(frozen=True)
class ArrayField:
    """A numpy array, declared in a :class:`Schema`: its dtype kinds, shape and values.

    Args:
        kinds: The dtype kinds it may have (``"iu"``: ints; ``"biuf"``: numbers).
        shape: Its shape (see :data:`Dim`); None: any. A shape other than the one declared
            is the live object's to refuse (:class:`~cairn.errors.IncompatibleCheckpointError`
            with the schema's ``unfit`` sentence); anything else here is corrupt.
        ndim: Its number of dimensions, when only that is fixed.
        finite: No NaN or infinity.
        low: No value below it (and no NaN: a NaN is within no bound).
        high: No value above it (and no NaN).
        unique: No value twice: ids, so a 1-D array (declared so, and refused in any other shape).

    Raises:
        ValueError: ``unique`` declared with a shape of more than one dimension.
    """

    kinds: str = "biuf"
    shape: tuple[Dim, ...] | None = None
    ndim: int | None = None
    finite: bool = False
    low: float | None = None
    high: float | None = None
    unique: bool = False

    def __post_init__(self) -> None:
        dims = self.ndim if self.shape is None else len(self.shape)
        if self.unique and dims not in (None, 1):
            # np.unique flattens: on rows it would compare values, not ids.
            raise ValueError(f"ArrayField(unique=True) is for 1-D arrays of ids, declared with {dims} dimensions.")

    def read(self, value: Any, *, where: str, read: Mapping[str, Any], unfit: str) -> Any:
        """``value``, checked (``read``: what the schema read before it, for named dimensions).

        Raises:
            CorruptCheckpointError: No array of these kinds, values out of range or repeated.
            IncompatibleCheckpointError: Another shape than declared.
        """
        if not isinstance(value, np.ndarray) or value.dtype.kind not in self.kinds:
            what = f"an array of {value.dtype}" if isinstance(value, np.ndarray) else f"a {type(value).__name__}"
            raise corrupt(
                where, f"expected an array of {_KINDS.get(self.kinds, self.kinds)}, the checkpoint holds {what}"
            )
        if self.ndim is not None and value.ndim != self.ndim:
            raise corrupt(where, f"expected {self.ndim} dimensions, the checkpoint holds shape {value.shape}")
        if self.shape is not None:
            wanted = tuple((len(read[d]) if d in read else None) if isinstance(d, str) else d for d in self.shape)
            if len(wanted) != value.ndim or any(
                w is not None and w != n for w, n in zip(wanted, value.shape, strict=True)
            ):
                shown = tuple("*" if w is None else w for w in wanted)
                raise IncompatibleCheckpointError(
                    f"{where} has shape {value.shape} in the checkpoint, but this object keeps {shown}: {unfit}"
                )
        if self.finite and value.dtype.kind == "f" and not np.isfinite(value).all():
            raise corrupt(where, "holds NaN or infinite values")
        bounded = self.low is not None or self.high is not None
        if bounded and value.dtype.kind == "f" and np.isnan(value).any():
            raise corrupt(where, "holds NaN, which is within no bound")  # NaN compares False: min() would pass it
        if self.low is not None and value.size and value.min() < self.low:
            raise corrupt(where, f"holds values below {self.low}")
        if self.high is not None and value.size and value.max() > self.high:
            raise corrupt(where, f"holds values above {self.high}")
        if self.unique:
            if value.ndim != 1:
                raise corrupt(where, f"expected a 1-D array of ids, the checkpoint holds shape {value.shape}")
            if len(np.unique(value)) != len(value):
                raise corrupt(where, "lists an id twice")
        return value


_KINDS = {"iu": "ints", "biuf": "numbers", "f": "floats"}

Field: TypeAlias = "Callable[..., Any] | ArrayField | Schema"
"""What a :class:`Schema` declares for a key: a check ``check(value, *, where)`` that returns the
parsed value or raises, an :class:`ArrayField`, or a nested :class:`Schema` for a dict."""


_UNFIT = "it was written for another configuration; restore it into the object it was written for."


@dataclass(frozen=True)
class Schema:
    """What a component's state holds, key by key, declared once instead of checked by hand.

    Each field maps a key to the check its value passes (:data:`Field`: :data:`count`, :class:`Count`,
    :class:`Number`, :class:`ById` (:data:`counts_by_id`), an :class:`ArrayField`, a nested :class:`Schema`). A key the
    state does not hold is skipped (an older state restores what it has) unless the schema is
    ``required``; keys the schema does not name are the component's to check.

    Example:
        ``Schema({"counters": Schema({"num_updates_lifetime": count})}).read(state, where="")``
    """

    fields: Mapping[str, Field]
    unfit: str = _UNFIT
    """What an :class:`ArrayField` of another shape means, and what to do (the end of that error)."""
    together: bool = False
    """The keys come all together or none at all (a part of them is corrupt)."""
    required: bool = False
    """Every key must be there (a state without one is corrupt)."""

    def __or__(self, more: Schema) -> Schema:
        """This schema with ``more``'s fields added (a subclass's state: nested schemas merge, key by key).

        The merged schema keeps what both sides declare: ``more``'s ``unfit`` when it has its own,
        and ``required`` / ``together`` when both sides say the same. Flags that would change the
        meaning of the other side's keys (``required`` on one side only; ``together`` over keys
        that one side adds) are refused: declare that part as a nested schema of its own.

        Raises:
            ValueError: The two sides' flags cannot hold for the merged keys, or both give another ``unfit``.
        """
        if self.unfit != more.unfit and _UNFIT not in (self.unfit, more.unfit):
            raise ValueError(f"Schemas with two unfit sentences cannot merge: {self.unfit!r} and {more.unfit!r}.")
        added = sorted(set(more.fields) - set(self.fields))
        if self.required != more.required or self.together != more.together or (self.together and added):
            raise ValueError(
                f"Schema(required={self.required}, together={self.together}) | Schema(required={more.required}, "
                f"together={more.together}) adding {added} would change what the other side's keys mean: "
                "declare the added keys as a nested Schema with their own flags."
            )
        fields = dict(self.fields)
        for key, check in more.fields.items():
            mine = fields.get(key)
            fields[key] = mine | check if isinstance(mine, Schema) and isinstance(check, Schema) else check
        unfit = self.unfit if more.unfit == _UNFIT else more.unfit
        return Schema(fields, unfit, self.together, self.required)

    def read(self, state: Any, *, where: str) -> dict[str, Any]:
        """The values of ``state`` this schema names, checked and parsed; changes nothing.

        Args:
            state: The (sub-)state, which must be a dict.
            where: Its path in the checkpoint for the error messages (``""``: the component's root).

        Raises:
            CorruptCheckpointError: ``state`` is no dict, or a value fails its check.
        """
        checked = mapping(state, where=where or "state")
        held = [k for k in self.fields if k in checked]
        if (self.required or (self.together and held)) and len(held) < len(self.fields):
            raise corrupt(where or "state", f"holds {held} without {sorted(set(self.fields) - set(held))}")
        out: dict[str, Any] = {}
        for key, check in self.fields.items():
            if key not in checked:
                continue
            path = f"{where}/{key}" if where else key
            if isinstance(check, Schema):
                out[key] = check.read(checked[key], where=path)
            elif isinstance(check, ArrayField):
                out[key] = check.read(checked[key], where=path, read=out, unfit=self.unfit)
            else:
                out[key] = check(checked[key], where=path)
        return out

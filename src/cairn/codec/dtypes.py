"""Dtype names read from files -> dtypes, through fixed tables and a fixed grammar.

A dtype name in a checkpoint is data, never an attribute name: ``getattr(torch,
name)`` would call ``torch.__getattr__`` for names it does not know, and that
hook imports submodules (a name like ``"_dynamo"`` loads hundreds of modules).
So torch dtypes are looked up in a table built from the real ``torch.dtype``
objects in torch's namespace, and numpy descriptors are checked against the
grammar of what :func:`numpy.lib.format.dtype_to_descr` writes, with bounded
nesting, field counts and shapes, before numpy sees them. Neither function
imports torch: a file cannot make the program load a framework it does not use.
"""

from __future__ import annotations

import re
import sys
from typing import Any

from cairn.errors import CorruptCheckpointError, IncompatibleCheckpointError

__all__ = ["MAX_DESCR_DEPTH", "MAX_DESCR_FIELDS", "numpy_dtype", "torch_dtype"]

MAX_DESCR_DEPTH = 8
"""Deepest nesting of structured numpy dtypes a file may describe."""

MAX_DESCR_FIELDS = 1024
"""Most fields (all levels together) a structured numpy dtype from a file may have."""

_MAX_SUBARRAY_DIMS = 32
_MAX_SUBARRAY_DIM = 2**31

# What dtype_to_descr writes for a plain dtype: byte order, kind and size, and for
# datetimes a unit. Sizes of S/U/V are bounded so that numpy never overflows on them.
_SIMPLE_DESCR = re.compile(
    r"[<>|=]?(?:b1|i[1248]|u[1248]|f(?:2|4|8|10|12|16)|c(?:8|16|20|24|32)|[SUV][0-9]{1,9}"
    r"|[mM]8(?:\[[0-9]{0,6}(?:Y|M|W|D|h|m|s|ms|us|ns|ps|fs|as|generic)\])?)"
)

_TORCH_DTYPES: dict[int, dict[str, Any]] = {}


def torch_dtype(name: Any, *, where: str, what: str = "tensors") -> Any:
    """Return the ``torch.dtype`` named ``name`` (``"float32"``, ``"bfloat16"``, ...).

    Args:
        name: The dtype name read from the file (without ``"torch."``).
        where: The file (and key) it was read from, for error messages.
        what: What the file holds, for the error when torch is not imported.

    Raises:
        IncompatibleCheckpointError: When this program has not imported torch
            (cairn does not import it because a file asks).
        CorruptCheckpointError: When ``name`` is not the name of a torch dtype.
    """
    torch = sys.modules.get("torch")
    if torch is None:
        raise IncompatibleCheckpointError(
            f"{where}: this checkpoint holds torch {what}, and this program has not imported torch; "
            "cairn does not import a framework because a file asks. Import torch first (cairn CLI: "
            "--import torch)."
        )
    table = _TORCH_DTYPES.get(id(torch))
    if table is None:
        # vars() reads the namespace without torch.__getattr__, which imports lazily.
        table = {
            str(value).removeprefix("torch."): value
            for value in list(vars(torch).values())
            if isinstance(value, torch.dtype)
        }
        _TORCH_DTYPES.clear()
        _TORCH_DTYPES[id(torch)] = table
    dtype = table.get(name) if isinstance(name, str) else None
    if dtype is None:
        raise CorruptCheckpointError(f"{where}: {name!r} is not the name of a torch dtype; the file is corrupt.")
    return dtype


def numpy_dtype(descr: Any, *, where: str) -> Any:
    """Rebuild a numpy dtype from a descriptor written by ``numpy.lib.format.dtype_to_descr``.

    Object dtypes are refused (they would need pickle), and so is anything
    outside the descriptor grammar or past the nesting and size bounds.

    Raises:
        CorruptCheckpointError: For an invalid, unsafe or oversized descriptor.
    """
    import numpy as np

    fields = [0]
    problem = _descr_problem(descr, 0, fields)
    if problem is not None:
        raise CorruptCheckpointError(f"{where}: invalid numpy dtype description ({problem}); the file is corrupt.")
    try:
        dtype = np.lib.format.descr_to_dtype(_as_tuples(descr))
    except (TypeError, ValueError, KeyError, OverflowError, IndexError) as err:
        raise CorruptCheckpointError(
            f"{where}: invalid numpy dtype description ({type(err).__name__}: {err}); the file is corrupt."
        ) from err
    if dtype.hasobject:
        raise CorruptCheckpointError(f"{where}: object dtypes are never loaded without pickle.")
    return dtype


def _descr_problem(descr: Any, depth: int, fields: list[int]) -> str | None:
    if isinstance(descr, str):
        return None if _SIMPLE_DESCR.fullmatch(descr) else f"{descr[:40]!r} is not a dtype"
    if not isinstance(descr, list | tuple):
        return f"a {type(descr).__name__} is not a dtype"
    if depth >= MAX_DESCR_DEPTH:
        return f"structured dtypes nest deeper than {MAX_DESCR_DEPTH} levels"
    for field in descr:
        fields[0] += 1
        if fields[0] > MAX_DESCR_FIELDS:
            return f"more than {MAX_DESCR_FIELDS} fields"
        if not isinstance(field, list | tuple) or len(field) not in (2, 3):
            return "a field is not a [name, dtype] or [name, dtype, shape] list"
        name = field[0]
        names = name if isinstance(name, list | tuple) and len(name) == 2 else [name]
        if not all(isinstance(n, str) and len(n) <= 256 for n in names):
            return "a field name is not a short string"
        if len(field) == 3:
            shape = field[2]
            if not (
                isinstance(shape, list | tuple)
                and len(shape) <= _MAX_SUBARRAY_DIMS
                and all(type(d) is int and 0 <= d <= _MAX_SUBARRAY_DIM for d in shape)
            ):
                return "a field's shape is not a short list of sizes"
        problem = _descr_problem(field[1], depth + 1, fields)
        if problem is not None:
            return problem
    return None


def _as_tuples(descr: Any) -> Any:
    """JSON and msgpack give lists where dtype_to_descr wrote tuples; numpy wants the tuples back."""
    if isinstance(descr, str):
        return descr
    out = []
    for field in descr:
        name = tuple(field[0]) if isinstance(field[0], list | tuple) else field[0]
        rest = [_as_tuples(field[1])]
        if len(field) == 3:
            rest.append(tuple(field[2]))
        out.append((name, *rest))
    return out

"""Constructor arguments bounded by what a checkpoint holds, checked before construction (SPEC 8).

A constructor that allocates by an argument (a network's ``hidden_sizes``, a
replay buffer's ``capacity`` and ``chunk_rows``) would let a small file make a
load take gigabytes and minutes before any check: a 39 KB module checkpoint
recording ``hidden_sizes=[6144] * 4`` built 450 MB of parameters. A component
class that allocates by its arguments defines the classmethod hook::

    @classmethod
    def ctor_args_problem(cls, args: tuple, kwargs: dict, folder: FolderSizes) -> str | None:
        ...  # why these arguments cannot belong to a folder of these sizes, or None

which compares what its constructor will allocate with what its checkpoint
folder holds (its parameter bytes, its chunk folders). :func:`check_ctor_args`
calls it; the engine calls :func:`check_ctor_args` once per component it builds,
after the constructor arguments are decoded and before the class is called.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cairn.errors import CheckpointError, CorruptCheckpointError, UnsafeCheckpointError

__all__ = [
    "ALLOC_BYTES_CONSTANT",
    "ALLOC_BYTES_PER_BYTE",
    "FolderSizes",
    "alloc_limit",
    "check_ctor_args",
    "check_machine",
    "mlp_parameter_bytes",
]

ALLOC_BYTES_PER_BYTE = 4
"""What a constructor may allocate per byte its checkpoint folder holds (a module's parameters are
its tensors file; optimizer moments, gradients and a target network are a few times more)."""

ALLOC_BYTES_CONSTANT = 64 << 20
"""What any constructor may allocate whatever its folder holds (small networks saved without state)."""


def alloc_limit(folder_bytes: int) -> int:
    """The most a constructor may allocate for a checkpoint folder of ``folder_bytes`` bytes."""
    return ALLOC_BYTES_PER_BYTE * max(0, int(folder_bytes)) + ALLOC_BYTES_CONSTANT


@dataclass(frozen=True)
class FolderSizes:
    """What a component's checkpoint folder holds, as its (verified) manifests list it.

    Attributes:
        files: The folder's own files: name -> size in bytes.
        components: The names of its component sub-folders.
        tree_bytes: The bytes of every file under the folder, its components' included.
    """

    files: Mapping[str, int]
    components: tuple[str, ...]
    tree_bytes: int


def check_ctor_args(
    cls: type, args: tuple[Any, ...], kwargs: Mapping[str, Any], folder: FolderSizes, *, where: str
) -> None:
    """Ask ``cls``'s ``ctor_args_problem`` hook, if it has one, whether these arguments fit ``folder``.

    Raises:
        CorruptCheckpointError: The hook found a problem: the arguments ask for more
            than the checkpoint can hold (a corrupt or hostile file).
        CheckpointError: The hook itself failed.
    """
    problem = _ask_hook(cls, "ctor_args_problem", (tuple(args), dict(kwargs), folder), where=where)
    if problem is not None:
        raise CorruptCheckpointError(
            f"{where}: the constructor arguments of {cls.__qualname__} do not fit what the checkpoint holds: "
            f"{problem}; it is corrupt or hostile, and nothing was built."
        )


def check_machine(
    cls: type, args: tuple[Any, ...], kwargs: Mapping[str, Any], *, overridden: frozenset[str], where: str
) -> None:
    """Ask ``cls``'s ``ctor_machine_problem`` hook whether recorded counts fit the caller's machine.

    A constructor that starts processes, threads or Ray actors by an argument
    (an algorithm's ``num_env_runners``, ``num_learners``, ``num_torch_threads``)
    defines the classmethod hook::

        @classmethod
        def ctor_machine_problem(cls, args: tuple, kwargs: dict, overridden: frozenset[str]) -> str | None:
            ...  # why the recorded counts start more than this machine allows, or None

    ``overridden`` names the arguments the caller passed to ``from_checkpoint``:
    those are the caller's explicit choice, not the file's. The engine calls it
    after the overrides are applied and before the class is called.

    Raises:
        UnsafeCheckpointError: The hook found a problem (its message names the field and the override).
        CheckpointError: The hook itself failed.
    """
    problem = _ask_hook(cls, "ctor_machine_problem", (tuple(args), dict(kwargs), overridden), where=where)
    if problem is not None:
        raise UnsafeCheckpointError(f"{where}: {cls.__qualname__} is not built: {problem}.")


def _ask_hook(cls: type, name: str, hook_args: tuple[Any, ...], *, where: str) -> str | None:
    """What ``cls``'s classmethod hook ``name`` says of the recorded arguments (None: no hook, or no problem).

    Raises:
        CorruptCheckpointError: The hook raised something else than a CheckpointError.
    """
    hook = getattr(cls, name, None)
    if hook is None:
        return None
    try:
        problem: str | None = hook(*hook_args)
    except CheckpointError:
        raise
    except Exception as err:  # a hook that misbehaves on hostile values: never let it escape
        raise CorruptCheckpointError(
            f"{where}: checking the constructor arguments of {cls.__qualname__} ({name}) failed "
            f"({type(err).__name__}: {err}); they are corrupt or hostile."
        ) from err
    return problem


def mlp_parameter_bytes(hidden_sizes: Any, *, itemsize: int = 4) -> int:
    """A lower bound of the parameter bytes of any MLP with these hidden widths: the hidden-to-hidden weights.

    Raises:
        ValueError: ``hidden_sizes`` is not a list of positive ints.
    """
    if not isinstance(hidden_sizes, list | tuple) or len(hidden_sizes) > 10_000:
        raise ValueError(f"hidden_sizes must be a list of ints, got {type(hidden_sizes).__qualname__}")
    widths = []
    for h in hidden_sizes:
        if type(h) is not int or h < 1:
            raise ValueError(f"hidden_sizes must hold ints >= 1, got {h!r:.40}")
        widths.append(h)
    return itemsize * sum(a * b for a, b in itertools.pairwise(widths))

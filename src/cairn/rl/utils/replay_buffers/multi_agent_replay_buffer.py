"""Per-module replay buffers: module id -> :class:`ReplayBuffer`, each a checkpoint component.

One buffer per module rather than one buffer with a module column, because
modules differ: their observation and action spaces give other column shapes
and dtypes, they learn at their own pace (each samples its own batches), and a
self-play run adds and removes modules while training. Each module's buffer is
then a complete checkpoint of its own (``replay_buffer/<module id>/``), so one
module's buffer restores alone (``component="<module id>"``) and a checkpoint
with modules ``{p0, p1}`` restores into a buffer with ``{p0}`` (p0 only) or
``{p0, p1, p2}`` (p2 left as it is), as a :class:`~cairn.rl.MultiRLModule` does.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator, Mapping
from typing import Any, ClassVar

import numpy as np

from cairn import Checkpointable
from cairn._ctor_bounds import FolderSizes
from cairn.rl.utils._util import Names, check_component_name
from cairn.rl.utils.replay_buffers.replay_buffer import ColumnSpecs, ReplayBuffer, chunks_problem

__all__ = ["MultiAgentReplayBuffer"]


def _module_seed(seed: int, module_id: str) -> int:
    """A module's own sampling seed: independent streams, and the same whichever modules exist."""
    return int(np.random.SeedSequence([seed, zlib.crc32(module_id.encode())]).generate_state(1)[0])


class MultiAgentReplayBuffer(Checkpointable):
    """A :class:`ReplayBuffer` per module id, each a checkpoint component named by its id.

    Args:
        capacity: Rows each module's buffer holds.
        columns: Module id -> that module's columns (name -> (row shape, dtype)).
        chunk_rows: Rows per chunk (None: each buffer's default).
        seed: Seed from which each module's sampling seed is derived.
    """

    STATE_VERSION = 1

    buffer_class: ClassVar[type[ReplayBuffer]] = ReplayBuffer
    """The buffer of each module; a subclass sets its own (built with ``(capacity, columns,
    chunk_rows=, seed=, **buffer_kwargs())``). An algorithm's config names the subclass (``replay_buffer_class``)."""

    def __init__(
        self,
        capacity: int,
        columns: Mapping[str, ColumnSpecs],
        *,
        chunk_rows: int | None = None,
        seed: int = 0,
    ) -> None:
        self.capacity = capacity
        self.chunk_rows = chunk_rows
        self.seed = int(seed)
        self.buffers: dict[str, ReplayBuffer] = {}
        for module_id, cols in columns.items():
            self.add_module(module_id, cols)

    def add_module(self, module_id: str, columns: ColumnSpecs) -> ReplayBuffer:
        """Add an empty buffer for ``module_id`` (self-play: a new opponent); return it.

        Raises:
            ValueError: The id is taken or not a valid component name.
        """
        check_component_name(module_id, what="Module id")
        if module_id in self.buffers:
            raise ValueError(f"MultiAgentReplayBuffer already has a buffer for module {module_id!r}.")
        buf = self.buffer_class(
            self.capacity,
            columns,
            chunk_rows=self.chunk_rows,
            seed=_module_seed(self.seed, module_id),
            **self.buffer_kwargs(),
        )
        self.buffers[module_id] = buf
        return buf

    def buffer_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of each module's buffer besides ``chunk_rows`` and ``seed`` (none here; a
        subclass whose :attr:`buffer_class` takes more returns them, and takes them in its constructor)."""
        return {}

    def remove_module(self, module_id: str) -> None:
        """Drop the buffer of ``module_id`` (the next checkpoint no longer holds it)."""
        if module_id not in self.buffers:
            raise KeyError(f"MultiAgentReplayBuffer has no module {module_id!r}; it has {sorted(self.buffers)}.")
        del self.buffers[module_id]

    def __getitem__(self, module_id: str) -> ReplayBuffer:
        """The buffer of ``module_id``."""
        return self.buffers[module_id]

    def __iter__(self) -> Iterator[str]:
        """The module ids."""
        return iter(self.buffers)

    def __len__(self) -> int:
        """Rows held, summed over modules."""
        return sum(len(b) for b in self.buffers.values())

    def add(self, batches: Mapping[str, Mapping[str, Any]]) -> None:
        """Add each module's rows to its buffer: ``{module_id: {column: array}}``."""
        unknown = sorted(set(batches) - set(self.buffers))
        if unknown:
            raise ValueError(f"MultiAgentReplayBuffer.add: no buffer for modules {unknown}; add_module them first.")
        for module_id, batch in batches.items():
            self.buffers[module_id].add(batch)

    def sample(self, num_items: int, *, module_ids: list[str] | None = None) -> dict[str, dict[str, np.ndarray]]:
        """``num_items`` rows from each module's buffer (those given, else every non-empty one)."""
        ids = module_ids if module_ids is not None else [m for m, b in self.buffers.items() if len(b)]
        return {m: self.buffers[m].sample(num_items) for m in ids}

    def get_checkpointable_components(self) -> list[tuple[str, Checkpointable]]:
        """``(module id, buffer)`` pairs."""
        return list(self.buffers.items())

    def get_state(self, components: Names = None, *, not_components: Names = None, **kwargs: Any) -> dict[str, Any]:
        """The module ids, and each selected module's buffer state under its id."""
        return {
            "modules": sorted(self.buffers),
            **self._get_components_state(components, not_components=not_components),
        }

    def set_state(self, state: dict[str, Any]) -> None:
        """Apply the states of the modules present in both; other modules are left as they are."""
        self._set_components_state(state)

    @classmethod
    def ctor_args_problem(cls, args: tuple[Any, ...], kwargs: dict[str, Any], folder: FolderSizes) -> str | None:
        """The hook of :mod:`cairn._ctor_bounds`: one buffer per module, each with its chunk objects
        (:meth:`ReplayBuffer.ctor_args_problem`)."""
        columns = args[1] if len(args) > 1 else kwargs.get("columns")
        buffers = len(columns) if isinstance(columns, Mapping) else 1
        return chunks_problem(args, kwargs, folder, buffers=max(1, buffers))

    def get_ctor_args_and_kwargs(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """``(capacity, columns of the current modules)`` with ``chunk_rows`` and ``seed``."""
        columns = {m: dict(b.layout) for m, b in self.buffers.items()}
        return (self.capacity, columns), {"chunk_rows": self.chunk_rows, "seed": self.seed, **self.buffer_kwargs()}

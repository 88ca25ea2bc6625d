"""Prioritized experience replay (Schaul et al., 2016, proportional) on the chunked ring buffer.

A :class:`PrioritizedReplayBuffer` is a :class:`~cairn.rl.utils.replay_buffers.ReplayBuffer`
(same columns, same chunks, same incremental saves) that samples row ``i`` with
probability ``p_i^alpha / sum_j p_j^alpha`` and returns, with each row, its
importance weight ``(N * P(i))^-beta / max_j (N * P(j))^-beta`` (``weights``) and its
row index (``batch_indexes``). After a gradient step the learner's TD errors set the
priorities of the rows it learned from (:meth:`PrioritizedReplayBuffer.update_priorities`):
``p = |td error| + epsilon``. A new row gets the largest priority given so far
(1.0 at first), so that every row is sampled at least once with high probability:
RLlib's ``PrioritizedEpisodeReplayBuffer`` does the same.

The priorities live in a sum tree and a min tree (the min gives the largest weight,
which normalizes the others), each one array of ``2 * P`` float64 nodes
(``P`` the power of two at or above ``capacity``), leaves at ``P .. P + capacity - 1``.
An inner node is always recomputed from its two children, never updated by a
difference, so the trees are a pure function of the leaves: rebuilt from the
saved leaves they are the same bits as the trees that were saved, and sampling
after a restore goes on exactly as it would have.

Checkpoints. Only the leaves are saved, in pages of ``priority_page_rows`` rows
(65,536 by default, 512 KB), each page a checkpoint component of its own
(``priorities_<k>.<layout hash>``) beside the data chunks; pages past the rows the
buffer holds are not saved. Priorities change wherever the learner sampled, and it
samples the whole buffer, so after a few hundred gradient steps every page has some
changed rows: rewriting each changed page would rewrite all ``8 * size`` bytes at
nearly every save. So a save writes a page again only once an eighth of its rows
changed since it was last written; the changed rows of the other pages go, with their
values, into an overlay in the buffer's own state (12 bytes a row), and their page
files are the same bytes as before, which a manager save links. A restore reads the
pages, then the overlay over them. Every step folder stays complete: the overlay is
relative to the pages in the same folder (linked files, not earlier folders). Saving
every few thousand gradient steps, a save writes the overlay and a page now and then;
saving rarely, every page is written again (measured: ``python -m bench --only replay_per``).
The buffer keeps the pages' bases (8 bytes a row) to tell what changed.

A hostile checkpoint is refused before anything changes (``check_state``): each
page's priorities must be float64 of the page's length, finite and ``>= 0``, and sum
to the sum the page and the buffer recorded (the tree must sum); the overlay's rows
must be increasing rows held and its values finite and ``> 0``; with the overlay
applied, every row held must be ``> 0`` and every row past them ``0``; ``alpha``
must be this buffer's.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from cairn import Checkpointable, CorruptCheckpointError, IncompatibleCheckpointError
from cairn._ctor_bounds import FolderSizes, alloc_limit
from cairn.rl.utils._util import Names
from cairn.rl.utils.replay_buffers.multi_agent_replay_buffer import MultiAgentReplayBuffer
from cairn.rl.utils.replay_buffers.priority_trees import PriorityTrees
from cairn.rl.utils.replay_buffers.replay_buffer import (
    CHUNK_OBJECT_BYTES,
    ColumnSpecs,
    ReplayBuffer,
    chunks_problem,
)

__all__ = [
    "DEFAULT_PRIORITY_PAGE_ROWS",
    "PrioritizedMultiAgentReplayBuffer",
    "PrioritizedReplayBuffer",
    "PriorityPage",
]

DEFAULT_PRIORITY_PAGE_ROWS = 1 << 16
"""Rows of priorities per checkpoint page (512 KB of float64): few enough files per save
(16 pages for a million rows), small enough that a save after little training rewrites little."""

_MIN_PRIORITY = 1e-12  # a row's priority never falls below this (RLlib's floor): every row stays drawable

_REWRITE_EVERY = 8
"""A save writes a page again once at least ``1 / _REWRITE_EVERY`` of its rows changed since it was
last written (its overlay would cost 12 bytes a row at every save, the page 8 bytes a row once)."""


@dataclass(frozen=True)
class _Pending:
    """What a buffer's checked state says its pages must add up to, while the restore runs."""

    size: int
    sums: list[float]
    overlay_rows: npt.NDArray[np.int64]
    overlay_values: npt.NDArray[np.float64]


def _check_param(name: str, value: Any, *, low: float, high: float = math.inf, low_open: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value!r:.80}.")
    if value < low or (low_open and value == low) or value > high:
        bounds = f"{'(' if low_open else '['}{low}, {high}{']' if high < math.inf else ')'}"
        raise ValueError(f"{name} must lie in {bounds}, got {value}.")
    return float(value)


class PriorityPage(Checkpointable):
    """Priorities (sum-tree leaves, ``p^alpha``) of rows ``start .. start + rows - 1`` of a buffer,
    as the page was last written (the buffer's overlay holds the rows changed since).

    Its state: ``{"index", "start", "priorities": float64 array, "sum": float}``. It
    offers no live buffers: a restore reads the priorities into a fresh array, so that
    :meth:`check_state` sees their values and refuses bad ones before any changes.

    Args:
        index: The page's number in its buffer.
        start: The buffer row of the page's first row.
        rows: How many rows the page holds.
    """

    def __init__(self, index: int, start: int, rows: int) -> None:
        self.index, self.start, self.rows = int(index), int(start), int(rows)
        self.values: npt.NDArray[np.float64] = np.zeros(self.rows, dtype=np.float64)
        self._owner: PrioritizedReplayBuffer | None = None

    @classmethod
    def _of(cls, index: int, start: int, values: npt.NDArray[np.float64], owner: PrioritizedReplayBuffer) -> Any:
        page = cls.__new__(cls)
        page.index, page.start, page.rows = index, start, len(values)
        page.values = values
        page._owner = owner
        return page

    @property
    def _where(self) -> str:
        return f"priority page {self.index} (rows {self.start}..{self.start + self.rows - 1})"

    def get_state(self, components: Names = None, *, not_components: Names = None, **kwargs: Any) -> dict[str, Any]:
        """The page's priorities (a view) and their sum."""
        return {"index": self.index, "start": self.start, "priorities": self.values, "sum": float(self.values.sum())}

    def check_state(self, state: dict[str, Any], components: Collection[str]) -> None:
        """Refuse priorities of the wrong length or dtype, negative, NaN or infinite ones, a sum that
        does not hold, and (inside a buffer's restore) values that do not fit the buffer's rows: checks
        against this page and its buffer, so a method, not a Schema.

        Raises:
            CorruptCheckpointError: Any of those: the checkpoint was damaged or tampered with.
        """
        if not isinstance(state, dict) or state.get("index") != self.index or state.get("start") != self.start:
            seen = (state.get("index"), state.get("start")) if isinstance(state, dict) else type(state).__name__
            raise CorruptCheckpointError(
                f"The state restored into {self._where} is not this page's (index, start: {seen!r:.80}); the page "
                "folders were renamed or the checkpoint was tampered with. Restore from another checkpoint."
            )
        values = state.get("priorities")
        if not isinstance(values, np.ndarray) or values.dtype != np.float64 or values.shape != (self.rows,):
            got = f"{values.dtype} {values.shape}" if isinstance(values, np.ndarray) else type(values).__name__
            raise CorruptCheckpointError(
                f"The priorities of {self._where} are {got} in the checkpoint, not float64 ({self.rows},): they "
                "do not fit the buffer's rows. The checkpoint was damaged or tampered with."
            )
        self._check_values(values, state.get("sum"))
        if self._owner is not None:
            self._owner._check_page(self.index, values)

    def _check_values(self, values: npt.NDArray[np.float64], recorded: Any) -> None:
        bad = ~np.isfinite(values) | (values < 0)
        if bad.any():
            row = self.start + int(np.argmax(bad))
            raise CorruptCheckpointError(
                f"The priorities of {self._where} hold {int(bad.sum())} negative, NaN or infinite values (first at "
                f"row {row}: {values[row - self.start]!r}); priorities are finite and >= 0. The checkpoint was "
                "damaged or tampered with; restore from another checkpoint."
            )
        total = float(values.sum())
        if isinstance(recorded, bool) or not isinstance(recorded, int | float) or not _close(total, recorded):
            raise CorruptCheckpointError(
                f"The priorities of {self._where} sum to {total!r}, but the page records {recorded!r:.80}: the "
                "priority tree does not sum. The checkpoint was damaged or tampered with."
            )

    def set_state(self, state: dict[str, Any]) -> None:
        """Copy the priorities in (after :meth:`check_state`); inside a buffer, its trees follow."""
        self.check_state(state, ())
        np.copyto(self.values, state["priorities"])
        if self._owner is not None:
            self._owner._page_loaded(self.index)

    @classmethod
    def ctor_args_problem(cls, args: tuple[Any, ...], kwargs: dict[str, Any], folder: FolderSizes) -> str | None:
        """The hook of :mod:`cairn._ctor_bounds`: a standalone page allocates ``rows`` float64 values."""
        rows = args[2] if len(args) > 2 else kwargs.get("rows")
        if type(rows) is int and rows * 8 > alloc_limit(folder.tree_bytes):
            return f"rows={rows} priorities take {rows * 8} bytes, and the page's folder holds {folder.tree_bytes}"
        return None

    def get_ctor_args_and_kwargs(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """``(index, start, rows)``."""
        return (self.index, self.start, self.rows), {}


def _close(a: float, b: float) -> bool:
    """Equal but for the last bits of a float64 sum (numpy's pairwise summation differs between CPUs)."""
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-300)


def _page_tag(capacity: int, page_rows: int) -> str:
    return hashlib.sha256(f"priorities:{capacity}:{page_rows}:float64".encode()).hexdigest()[:8]


SAMPLE_EXTRA_COLUMNS = ("weights", "batch_indexes")
"""The columns :meth:`PrioritizedReplayBuffer.sample` adds (RLlib's names): a buffer refuses columns of these names."""


class PrioritizedReplayBuffer(ReplayBuffer):
    """A :class:`~cairn.rl.utils.replay_buffers.ReplayBuffer` that samples rows in proportion to their priorities.

    Sampling returns the columns plus ``weights`` (float32 importance weights, the
    largest possible one being 1) and ``batch_indexes`` (int64 rows, for
    :meth:`update_priorities`). Components: the data chunks, and the priority pages
    (:class:`PriorityPage`) of the rows held; see the module docstring.

    Args:
        capacity: Rows the buffer holds.
        columns: Column name -> (row shape, dtype).
        chunk_rows: Rows per data chunk (see :class:`ReplayBuffer`).
        seed: Seed of the sampling RNG (priorities and, for the algorithm, n-step draws).
        alpha: How much priorities count: 0 is uniform sampling, 1 fully proportional.
        beta: How much the importance weights correct for it: 0 not at all, 1 fully.
        epsilon: Added to ``|td error|``, so that a row learned perfectly is still drawn.
        priority_page_rows: Rows of priorities per checkpoint page, at most ``capacity``.

    Example::

        buf = PrioritizedReplayBuffer(50_000, columns, alpha=0.6, beta=0.4, seed=0)
        buf.add(rows)                             # new rows get the largest priority so far
        batch = buf.sample(32)                    # + batch["weights"], batch["batch_indexes"]
        buf.update_priorities(batch["batch_indexes"], td_errors)
    """

    STATE_VERSION = 1

    def __init__(
        self,
        capacity: int,
        columns: ColumnSpecs,
        *,
        chunk_rows: int | None = None,
        seed: int = 0,
        alpha: float = 0.6,
        beta: float = 0.4,
        epsilon: float = 1e-6,
        priority_page_rows: int | None = None,
    ) -> None:
        taken = sorted(set(columns) & set(SAMPLE_EXTRA_COLUMNS)) if isinstance(columns, Mapping) else []
        if taken:
            raise ValueError(f"PrioritizedReplayBuffer: columns {taken} are names sample() adds; rename them.")
        super().__init__(capacity, columns, chunk_rows=chunk_rows, seed=seed)
        self.alpha = _check_param("alpha", alpha, low=0.0)
        self.beta = _check_param("beta", beta, low=0.0)
        self.epsilon = _check_param("epsilon", epsilon, low=0.0)
        page_rows = min(capacity, DEFAULT_PRIORITY_PAGE_ROWS) if priority_page_rows is None else priority_page_rows
        if type(page_rows) is not int or not 1 <= page_rows <= capacity:
            raise ValueError(f"priority_page_rows must be an int in 1..capacity ({capacity}), got {page_rows!r}.")
        self.priority_page_rows = page_rows
        self.max_priority = 1.0
        self._trees = PriorityTrees(capacity)
        # The leaves as the pages last saved them: a save rewrites a page that changed much and
        # lists the few changed rows of the others (the overlay) in the buffer's own state.
        self._base = np.zeros(capacity, dtype=np.float64)
        tag = _page_tag(capacity, page_rows)
        self._pages: list[tuple[str, PriorityPage]] = [
            (f"priorities_{k:05d}.{tag}", PriorityPage._of(k, start, self._base[start : start + page_rows], self))
            for k, start in enumerate(range(0, capacity, page_rows))
        ]
        # While a restore runs: what the buffer's own state (checked first, top-down) says the pages
        # must hold, and which pages the restore applied (bottom-up, before the buffer's set_state).
        self._pending: _Pending | None = None
        self._pages_loaded: set[int] = set()

    # ------------------------------------------------------------------ the buffer

    @property
    def priorities(self) -> npt.NDArray[np.float64]:
        """A read-only view of the rows' sampling weights ``p^alpha`` (0 past the rows held)."""
        view = self._trees.leaves[: self.capacity].view()
        view.flags.writeable = False
        return view

    def add(self, batch: Mapping[str, Any]) -> None:
        """Append rows (see :meth:`ReplayBuffer.add`); each new row gets the largest priority so far."""
        cursor, before = self.cursor, self.added_lifetime
        super().add(batch)
        n = self.added_lifetime - before
        keep = min(n, self.capacity)  # the rows add wrote: the newest `keep` of the batch
        rows = (cursor + n - keep + np.arange(keep, dtype=np.int64)) % self.capacity
        self._trees.leaves[rows] = self.max_priority**self.alpha
        self._trees.refresh(rows)

    def sample(self, num_items: int, *, beta: float | None = None) -> dict[str, np.ndarray]:
        """Draw ``num_items`` rows with replacement, row ``i`` with probability ``p_i^alpha / sum``.

        Args:
            num_items: Rows to draw.
            beta: The importance-weight exponent for this draw (default: the buffer's).

        Returns:
            The columns, plus ``weights`` (float32) and ``batch_indexes`` (int64).

        Raises:
            ValueError: The buffer is empty, or ``num_items`` is negative.
        """
        self._check_draw(num_items)
        b = self.beta if beta is None else _check_param("beta", beta, low=0.0)
        total = self._trees.total
        idx = self._trees.find(self.rng.random(num_items) * total)
        p = self._trees.leaves[idx] / total
        p_min = self._trees.smallest / total
        weights = (p / p_min) ** -b  # (N p)^-b / (N p_min)^-b
        self.sampled_lifetime += num_items
        out = {name: col[idx] for name, col in self.columns.items()}
        out["weights"] = weights.astype(np.float32)
        out["batch_indexes"] = idx
        return out

    def update_priorities(self, indices: Any, td_errors: Any) -> None:
        """Set the priorities of rows ``indices`` to ``|td_errors| + epsilon`` (RLlib's ``update_priorities``).

        A row given twice takes its last value.

        Raises:
            ValueError: Lengths differ, an index is not a row held, or a TD error is NaN or infinite
                (the loss diverged: priorities from it would stop sampling everything else).
        """
        idx = np.asarray(indices)
        td = np.asarray(td_errors, dtype=np.float64)
        if idx.ndim != 1 or td.shape != idx.shape or (idx.size and idx.dtype.kind not in "iu"):
            raise ValueError(
                f"update_priorities: indices ({idx.dtype} {idx.shape}) and td_errors ({td.shape}) must be 1-d "
                "of the same length, the indices ints (a sample's batch_indexes)."
            )
        if idx.size == 0:
            return
        if idx.min() < 0 or idx.max() >= self.size:
            raise ValueError(
                f"update_priorities: indices must be rows held (0..{self.size - 1}), got "
                f"{int(idx.min())}..{int(idx.max())}."
            )
        if not np.isfinite(td).all():
            raise ValueError(
                "update_priorities: the TD errors hold NaN or infinite values (the loss diverged); lower the "
                "learning rate or clip gradients (max_grad_norm)."
            )
        reverse = idx[::-1].astype(np.int64)
        rows, last = np.unique(reverse, return_index=True)
        priority = np.maximum(np.abs(td[::-1][last]) + self.epsilon, _MIN_PRIORITY)
        self._trees.leaves[rows] = priority**self.alpha
        self.max_priority = max(self.max_priority, float(priority.max()))
        self._trees.refresh(rows)

    # ------------------------------------------------------------------ checkpoints

    def _needed_pages(self, size: int) -> int:
        return -(-size // self.priority_page_rows)

    def get_checkpointable_components(self) -> list[tuple[str, Checkpointable]]:
        """The data chunks and the priority pages; only those holding rows are saved."""
        self._pending, self._pages_loaded = None, set()  # forget what an earlier, failed restore left
        return [*super().get_checkpointable_components(), *self._pages]

    def get_state(self, components: Names = None, *, not_components: Names = None, **kwargs: Any) -> dict[str, Any]:
        """The buffer's state, plus alpha, the largest priority, the pages with their sums, and the overlay.

        Page by page: a page whose leaves changed in at least an eighth of its rows since it
        was last written is written again (its base becomes the leaves); the changed rows of
        the others go into the overlay (``priority_overlay_rows`` / ``_values``, 12 bytes a
        row, in this buffer's own folder), and their page files stay the same bytes (linked).
        """
        state = super().get_state(components, not_components=not_components, **kwargs)
        needed = self._pages[: self._needed_pages(self.size)]
        leaves = self._trees.leaves
        overlay: list[npt.NDArray[np.int64]] = []
        for _, page in needed:
            live = leaves[page.start : page.start + page.rows]
            changed = np.flatnonzero(live != page.values)
            if len(changed) >= max(1, page.rows // _REWRITE_EVERY):
                page.values[:] = live
            elif len(changed):
                overlay.append(changed + page.start)
        rows = np.concatenate(overlay) if overlay else np.zeros(0, dtype=np.int64)
        state.update(
            alpha=self.alpha,
            max_priority=self.max_priority,
            priority_page_rows=self.priority_page_rows,
            priority_pages=[name for name, _ in needed],
            priority_sums=[float(page.values.sum()) for _, page in needed],
            priority_overlay_rows=rows.astype(np.int64),
            priority_overlay_values=leaves[rows].astype(np.float64),
        )
        for name, page in needed:
            if self._check_component(name, components, not_components):
                state[name] = page.get_state()
        return state

    def check_state(self, state: dict[str, Any], components: Collection[str]) -> None:
        """What :meth:`ReplayBuffer.check_state` refuses, and priorities that do not fit (see the module doc).

        Raises:
            IncompatibleCheckpointError: Another layout, page size or alpha.
            CorruptCheckpointError: A page list, page sums, overlay or largest priority that do not
                hold together, or a page the rows need that is not in the checkpoint.
        """
        super().check_state(state, components)
        brought = set(components)
        self._pending = self._check_priority_state(state, {page.index for name, page in self._pages if name in brought})

    def _check_priority_state(self, state: dict[str, Any], loaded: set[int]) -> _Pending:
        """What ``state`` says the pages must add up to, once its own priority keys fit this buffer."""
        alpha, page_rows = state.get("alpha"), state.get("priority_page_rows")
        if page_rows != self.priority_page_rows or not isinstance(alpha, float) or alpha != self.alpha:
            raise IncompatibleCheckpointError(
                f"The prioritized replay buffer checkpoint has alpha={alpha!r:.40} and priority pages of "
                f"{page_rows!r:.40} rows, but this buffer has alpha={self.alpha} and pages of "
                f"{self.priority_page_rows}: its priorities (p^alpha) do not fit. Build the buffer with the "
                "checkpoint's alpha and priority_page_rows (PrioritizedReplayBuffer.from_checkpoint does)."
            )
        size = int(state["size"])  # checked by ReplayBuffer's own check
        needed = [name for name, _ in self._pages[: self._needed_pages(size)]]
        sums = state.get("priority_sums")
        problem = _priority_keys_problem(state, size, needed)
        if problem:
            raise CorruptCheckpointError(
                f"The prioritized replay buffer checkpoint's priorities do not hold together: {problem}. It was "
                "damaged or tampered with; restore the buffer from another checkpoint."
            )
        missing = [name for name, page in self._pages[: len(needed)] if page.index not in loaded and name not in state]
        if missing:
            raise CorruptCheckpointError(
                f"The prioritized replay buffer checkpoint holds {size} rows, whose priorities are in pages "
                f"{needed[0]} .. {needed[-1]}, but {len(missing)} of them are not in it ({', '.join(missing[:3])}"
                f"{' ...' if len(missing) > 3 else ''}). The checkpoint is incomplete or was tampered with."
            )
        assert isinstance(sums, list)  # checked above
        return _Pending(size, list(sums), state["priority_overlay_rows"], state["priority_overlay_values"])

    def _check_page(self, index: int, values: npt.NDArray[np.float64]) -> None:
        """A page's check against the buffer's checked state: its sum, and its rows with the overlay applied.

        A page restored alone (no buffer state checked) is checked by itself only.
        """
        pending = self._pending
        if pending is None:
            return
        page = self._pages[index][1]
        final = values.copy()
        lo, hi = np.searchsorted(pending.overlay_rows, [page.start, page.start + page.rows])
        final[pending.overlay_rows[lo:hi] - page.start] = pending.overlay_values[lo:hi]
        held = min(max(pending.size - page.start, 0), page.rows)
        problem = ""
        if held and not (final[:held] > 0).all():
            problem = f"row {page.start + int(np.argmin(final[:held] > 0))} is held but has priority 0"
        elif (final[held:] != 0).any():
            first = page.start + held + int(np.argmax(final[held:] != 0))
            problem = f"rows past the {pending.size} held have priorities (row {first})"
        elif index < len(pending.sums) and not _close(float(values.sum()), pending.sums[index]):
            problem = (
                f"they sum to {float(values.sum())!r}, but the buffer records {pending.sums[index]!r}: the tree "
                "does not sum"
            )
        if problem:
            raise CorruptCheckpointError(
                f"The priorities of {page._where} do not fit the buffer's: {problem}. The checkpoint was damaged "
                "or tampered with; restore the buffer from another checkpoint."
            )

    def _page_loaded(self, index: int) -> None:
        """A page's base was restored: the leaves of its rows follow (the overlay comes after)."""
        self._pages_loaded.add(index)
        page = self._pages[index][1]
        leaves = self._trees.leaves
        leaves[page.start : page.start + page.rows] = page.values
        if self._pending is None:  # restored alone (no buffer state): rows past those held stay undrawable
            leaves[max(self.size, page.start) : page.start + page.rows] = 0.0
        self._trees.refresh_range(page.start, page.start + page.rows)

    def set_state(self, state: dict[str, Any]) -> None:
        """Apply a state: the checks of :meth:`check_state` first, then rows, pages, overlay, trees, counters.

        Raises:
            IncompatibleCheckpointError: Another layout, page size or alpha.
            CorruptCheckpointError: What :meth:`check_state` refuses.
        """
        loaded, old_size = self._pages_loaded, self.size
        try:
            self._pending = pending = self._check_priority_state(state, loaded)
            inline = [(name, page) for name, page in self._pages if name in state]
            for name, page in inline:  # pages given in memory: check them all before anything changes
                page.check_state(state[name], ())
            super().set_state(state)
            leaves = self._trees.leaves
            for name, page in inline:
                np.copyto(page.values, state[name]["priorities"])
                leaves[page.start : page.start + page.rows] = page.values
            # Rows past the new size were the live buffer's: empty again, in the leaves and the bases.
            end = max(old_size, self.size)
            leaves[self.size : end] = 0.0
            self._base[self.size : end] = 0.0
            leaves[pending.overlay_rows] = pending.overlay_values
            # Every inner node over the rows either buffer held, recomputed from the leaves: the
            # saved trees, bit for bit.
            self._trees.refresh_range(0, end)
            self.max_priority = float(state["max_priority"])
        finally:
            self._pending, self._pages_loaded = None, set()

    @classmethod
    def ctor_args_problem(cls, args: tuple[Any, ...], kwargs: dict[str, Any], folder: FolderSizes) -> str | None:
        """The hook of :mod:`cairn._ctor_bounds`: the chunk and page objects the constructor makes are bounded."""
        return chunks_problem(args, kwargs, folder, buffers=1) or pages_problem(args, kwargs, folder, buffers=1)

    def get_ctor_args_and_kwargs(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """``(capacity, columns)`` with ``chunk_rows``, ``seed`` and :meth:`priority_kwargs`."""
        args, kwargs = super().get_ctor_args_and_kwargs()
        return args, {**kwargs, **self.priority_kwargs()}

    def priority_kwargs(self) -> dict[str, Any]:
        """``alpha``, ``beta``, ``epsilon`` and ``priority_page_rows``: what a copy of this buffer is built with."""
        return {
            "alpha": self.alpha,
            "beta": self.beta,
            "epsilon": self.epsilon,
            "priority_page_rows": self.priority_page_rows,
        }


def _priority_keys_problem(state: dict[str, Any], size: int, needed: list[str]) -> str:
    """What does not hold together in a buffer state's own priority keys ("" when they do)."""
    sums, max_priority = state.get("priority_sums"), state.get("max_priority")
    rows, values = state.get("priority_overlay_rows"), state.get("priority_overlay_values")
    if state.get("priority_pages") != needed:
        return f"its page list is not the {len(needed)} pages that {size} rows fill"
    if not isinstance(sums, list) or len(sums) != len(needed):
        return (
            f"it records {len(sums) if isinstance(sums, list) else repr(sums)[:40]} page sums for {len(needed)} pages"
        )
    if not all(isinstance(x, float) and math.isfinite(x) and x >= 0 for x in sums):
        return "its page sums are not finite floats >= 0"
    if not isinstance(max_priority, float) or not math.isfinite(max_priority) or max_priority < 1.0:
        return f"its largest priority {max_priority!r:.40} is not a finite float >= 1 (it starts at 1)"
    if not (
        isinstance(rows, np.ndarray)
        and isinstance(values, np.ndarray)
        and rows.dtype == np.int64
        and values.dtype == np.float64
        and rows.ndim == 1
        and values.shape == rows.shape
    ):
        return "its overlay is not an int64 row array and a float64 value array of one length"
    if rows.size and (rows[0] < 0 or rows[-1] >= size or not (np.diff(rows) > 0).all()):
        return f"its overlay rows are not increasing rows held (0..{size - 1})"
    if not (np.isfinite(values) & (values > 0)).all():
        return "its overlay holds priorities that are not finite and > 0"
    return ""


def pages_problem(args: tuple[Any, ...], kwargs: Mapping[str, Any], folder: FolderSizes, *, buffers: int) -> str | None:
    """Why ``buffers`` buffers of the recorded capacity and page rows make more page objects than ``folder`` allows."""
    capacity = args[0] if args else kwargs.get("capacity")
    page_rows = kwargs.get("priority_page_rows")
    if type(capacity) is not int or type(page_rows) is not int or capacity < 1 or page_rows < 1:
        return None  # the default page size, or values the constructor refuses
    pages = buffers * -(-capacity // page_rows)
    need = pages * CHUNK_OBJECT_BYTES
    if need > alloc_limit(folder.tree_bytes):
        return (
            f"capacity={capacity} in priority pages of {page_rows} rows make {pages} page objects (about {need} "
            f"bytes), and the buffer's folder holds {folder.tree_bytes} bytes"
        )
    return None


class PrioritizedMultiAgentReplayBuffer(MultiAgentReplayBuffer):
    """A :class:`PrioritizedReplayBuffer` per module id (see :class:`MultiAgentReplayBuffer`).

    Each module's buffer has its own priorities, sampling RNG and pages
    (``replay_buffer/<module id>/priorities_*``); the learner's TD errors of a module
    update that module's buffer (:meth:`update_priorities`).

    Args:
        capacity: Rows each module's buffer holds.
        columns: Module id -> that module's columns.
        chunk_rows: Rows per data chunk (None: each buffer's default).
        seed: Seed from which each module's sampling seed is derived.
        alpha: See :class:`PrioritizedReplayBuffer` (every module's).
        beta: See :class:`PrioritizedReplayBuffer`.
        epsilon: See :class:`PrioritizedReplayBuffer`.
        priority_page_rows: See :class:`PrioritizedReplayBuffer`.
    """

    buffer_class: ClassVar[type[ReplayBuffer]] = PrioritizedReplayBuffer
    buffers: dict[str, PrioritizedReplayBuffer]  # type: ignore[assignment]

    def __init__(
        self,
        capacity: int,
        columns: Mapping[str, ColumnSpecs],
        *,
        chunk_rows: int | None = None,
        seed: int = 0,
        alpha: float = 0.6,
        beta: float = 0.4,
        epsilon: float = 1e-6,
        priority_page_rows: int | None = None,
    ) -> None:
        self._priority_kwargs: dict[str, Any] = {
            "alpha": _check_param("alpha", alpha, low=0.0),
            "beta": _check_param("beta", beta, low=0.0),
            "epsilon": _check_param("epsilon", epsilon, low=0.0),
            "priority_page_rows": priority_page_rows,
        }
        super().__init__(capacity, columns, chunk_rows=chunk_rows, seed=seed)

    def buffer_kwargs(self) -> dict[str, Any]:
        """alpha, beta, epsilon and priority_page_rows for each module's buffer."""
        return dict(self._priority_kwargs)

    def update_priorities(self, module_id: str, indices: Any, td_errors: Any) -> None:
        """:meth:`PrioritizedReplayBuffer.update_priorities` of module ``module_id``'s buffer."""
        self.buffers[module_id].update_priorities(indices, td_errors)

    @classmethod
    def ctor_args_problem(cls, args: tuple[Any, ...], kwargs: dict[str, Any], folder: FolderSizes) -> str | None:
        """The hook of :mod:`cairn._ctor_bounds`: chunk and page objects of every module's buffer."""
        columns = args[1] if len(args) > 1 else kwargs.get("columns")
        buffers = max(1, len(columns) if isinstance(columns, Mapping) else 1)
        return chunks_problem(args, kwargs, folder, buffers=buffers) or pages_problem(
            args, kwargs, folder, buffers=buffers
        )

"""RLlib's ``SegmentTree``/``SumSegmentTree``/``MinSegmentTree`` API over cairn's tree arithmetic.

The same arithmetic the prioritized replay buffer's trees use
(:class:`cairn.rl.utils.replay_buffers.priority_trees.PriorityTrees` is built on these classes):
one float64 array of ``2 * capacity`` nodes, leaves at ``capacity .. 2 * capacity - 1``, node 1
the reduction of all leaves, and an inner node always recomputed from its two children (never
updated by a difference), so a tree is a pure function of its leaves. RLlib keeps the nodes in
a Python list; here they are a numpy array, so whole sets of leaves refresh level by level
(:meth:`SegmentTree.refresh`) and a batch of prefix sums descends at once
(:meth:`SumSegmentTree.find`).

This module is on the lowest floor of ``rl/`` (docs/architecture.md): it imports numpy only.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["MinSegmentTree", "SegmentTree", "SumSegmentTree", "min_positive"]

Floats = npt.NDArray[np.float64]


def min_positive(left: Any, right: Any) -> Any:
    """The smaller of two values where 0 means "empty" (the min of the positive ones; 0 if both are 0).

    Elementwise on arrays; the min tree of the prioritized buffer combines with it, so leaves it never
    filled stay 0 and cost no memory.
    """
    return np.where(left == 0, right, np.where(right == 0, left, np.minimum(left, right)))


# RLlib's scalar operations and the elementwise ufunc that computes the same on a level of nodes.
_ELEMENTWISE: dict[Any, Callable[[Any, Any], Any]] = {operator.add: np.add, min: np.minimum, max: np.maximum}


def _check_capacity(capacity: int) -> None:
    # RLlib asserts the same; the tree's index arithmetic (leaf i at node capacity + i) needs it.
    if isinstance(capacity, bool) or not isinstance(capacity, (int, np.integer)):
        raise TypeError(f"SegmentTree capacity must be an int, got {type(capacity).__name__}")
    if capacity <= 0 or capacity & (capacity - 1):
        raise ValueError(
            f"SegmentTree capacity must be a positive power of two (as RLlib asserts), got {capacity}; "
            f"round it up, e.g. to {1 << max(0, (int(capacity) - 1).bit_length())}"
        )


class SegmentTree:
    """A binary tree over ``capacity`` values that reduces any contiguous range in O(log capacity).

    ``operation`` combines two values: ``operator.add``, ``min`` and ``max`` (RLlib's) run as numpy
    ufuncs on a whole level of nodes; any other must work elementwise on numpy arrays (as
    :func:`min_positive` does). ``neutral_element`` is the value of an empty leaf; ``None`` picks
    RLlib's: 0.0 for ``operator.add``, ``-inf`` for ``max``, ``inf`` otherwise.
    """

    def __init__(self, capacity: int, operation: Any, neutral_element: float | None = None) -> None:
        _check_capacity(capacity)
        self.capacity = int(capacity)
        if neutral_element is None:
            neutral_element = 0.0 if operation is operator.add else float("-inf") if operation is max else float("inf")
        self.neutral_element = float(neutral_element)
        self.operation = operation
        self._combine: Callable[[Any, Any], Any] = _ELEMENTWISE.get(operation, operation)
        # np.zeros maps untouched pages lazily: a large, mostly empty tree costs what it holds.
        if self.neutral_element == 0.0:
            self.value: Floats = np.zeros(2 * self.capacity, dtype=np.float64)
        else:
            self.value = np.full(2 * self.capacity, self.neutral_element, dtype=np.float64)

    def _index(self, idx: int) -> int:
        if not 0 <= idx < self.capacity:
            raise IndexError(f"SegmentTree index {idx} is outside [0, {self.capacity}): pass a leaf's index")
        return int(idx) + self.capacity

    def reduce(self, start: int = 0, end: int | None = None) -> float:
        """``operation`` over the leaves ``start .. end - 1`` (``end`` None: to the last; negative: from the end)."""
        if end is None:
            end = self.capacity
        elif end < 0:
            end += self.capacity
        result = self.neutral_element
        lo, hi = start + self.capacity, end + self.capacity
        # Climb from the leaves: an odd left bound or an odd right bound is a whole subtree to take.
        while lo < hi:
            if lo & 1:
                result = float(self._combine(result, self.value[lo]))
                lo += 1
            if hi & 1:
                hi -= 1
                result = float(self._combine(result, self.value[hi]))
            lo //= 2
            hi //= 2
        return result

    def _recompute(self, nodes: npt.NDArray[np.int64]) -> None:
        self.value[nodes] = self._combine(self.value[2 * nodes], self.value[2 * nodes + 1])

    def refresh(self, leaves: npt.NDArray[np.int64]) -> None:
        """Recompute every ancestor of the leaves ``leaves`` (their values written into :attr:`value`)."""
        nodes = np.unique(np.asarray(leaves, dtype=np.int64) + self.capacity)
        while nodes.size and nodes[0] > 1:
            nodes = np.unique(nodes // 2)
            self._recompute(nodes)

    def refresh_range(self, lo: int, hi: int) -> None:
        """Recompute the ancestors of the leaves ``lo .. hi - 1`` level by level (a rebuild of that range)."""
        if hi <= lo:
            return
        first, last = lo + self.capacity, hi - 1 + self.capacity
        while first > 1:
            first, last = first // 2, last // 2
            self._recompute(np.arange(first, last + 1, dtype=np.int64))

    def __setitem__(self, idx: int, val: float) -> None:
        """Set leaf ``idx`` to ``val`` and recompute its ancestors."""
        node = self._index(idx)
        self.value[node] = val
        node >>= 1
        while node >= 1:
            self.value[node] = self._combine(self.value[2 * node], self.value[2 * node + 1])
            node >>= 1

    def __getitem__(self, idx: int) -> float:
        """The value of leaf ``idx``."""
        return float(self.value[self._index(idx)])

    def get_state(self) -> Floats:
        """All ``2 * capacity`` nodes (a copy)."""
        return self.value.copy()

    def set_state(self, state: Any) -> None:
        """Restore the nodes :meth:`get_state` returned (checked to be ``2 * capacity`` long)."""
        nodes = np.asarray(state, dtype=np.float64)
        if nodes.shape != (2 * self.capacity,):
            raise ValueError(
                f"SegmentTree state has shape {nodes.shape}, expected ({2 * self.capacity},) for capacity "
                f"{self.capacity}: pass the state of a tree of the same capacity"
            )
        self.value = nodes.copy()


class SumSegmentTree(SegmentTree):
    """A :class:`SegmentTree` that sums (``operator.add``), with the prefix-sum search sampling needs."""

    def __init__(self, capacity: int) -> None:
        super().__init__(capacity=capacity, operation=operator.add)

    def sum(self, start: int = 0, end: int | None = None) -> float:
        """The sum of the leaves ``start .. end - 1``."""
        return self.reduce(start, end)

    def find(self, targets: Floats) -> npt.NDArray[np.int64]:
        """For each target in ``[0, sum())``: the leaf whose prefix-sum interval holds it.

        A branch whose sum is 0 is never taken, so rounding cannot land on an empty leaf.
        """
        idx = np.ones(np.shape(targets), dtype=np.int64)
        u = np.asarray(targets, dtype=np.float64).copy()
        while idx.size and idx.flat[0] < self.capacity:
            left = 2 * idx
            left_sum = self.value[left]
            go_right = ((u >= left_sum) & (self.value[left + 1] > 0)) | (left_sum == 0)
            u = np.where(go_right, u - left_sum, u)
            idx = np.where(go_right, left + 1, left)
        return idx - self.capacity

    def find_prefixsum_idx(self, prefixsum: float) -> int:
        """The highest ``i`` with ``sum(0, i) <= prefixsum`` (RLlib's; ``prefixsum`` in ``[0, sum()]``)."""
        total = float(self.value[1])
        # RLlib's bound, with its tolerance of 1e-5 above the total.
        if not 0 <= prefixsum <= total + 1e-5:
            raise ValueError(f"find_prefixsum_idx: prefixsum {prefixsum} is outside [0, {total}] (the tree's sum)")
        # RLlib clips a prefix sum at the total into the last interval (its issue 54284).
        if prefixsum >= total:
            prefixsum = total - 1e-5
        return int(self.find(np.array([prefixsum], dtype=np.float64))[0])


class MinSegmentTree(SegmentTree):
    """A :class:`SegmentTree` that takes the minimum (empty leaves are ``inf``, as in RLlib)."""

    def __init__(self, capacity: int) -> None:
        super().__init__(capacity=capacity, operation=min)

    def min(self, start: int = 0, end: int | None = None) -> float:
        """The minimum of the leaves ``start .. end - 1``."""
        return self.reduce(start, end)

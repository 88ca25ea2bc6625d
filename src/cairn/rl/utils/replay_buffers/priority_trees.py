"""The sum tree and min tree over a prioritized buffer's priorities (:class:`PriorityTrees`).

Each tree is one array of ``2 * P`` float64 nodes (``P`` the power of two at or above
``capacity``), leaves at ``P .. P + capacity - 1``. An inner node is always recomputed
from its two children, never updated by a difference, so the trees are a pure function
of the leaves: rebuilt from saved leaves they are the same bits as the trees that were saved.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

__all__ = ["PriorityTrees"]


class PriorityTrees:
    """A sum tree and a min tree over ``capacity`` leaves; empty leaves are 0 in both.

    The min tree ignores zeros (the min of the positive leaves), so both arrays start
    as ``np.zeros``: pages the buffer never fills cost no memory.
    """

    def __init__(self, capacity: int) -> None:
        self.base = 1 << max(0, (capacity - 1).bit_length())  # P: the first leaf's node
        self.sum = np.zeros(2 * self.base, dtype=np.float64)
        self.min = np.zeros(2 * self.base, dtype=np.float64)

    @property
    def leaves(self) -> npt.NDArray[np.float64]:
        """The leaves of the sum tree (a view: write them, then :meth:`refresh`)."""
        return self.sum[self.base :]

    def _recompute(self, nodes: npt.NDArray[np.int64]) -> None:
        left, right = self.sum[2 * nodes], self.sum[2 * nodes + 1]
        self.sum[nodes] = left + right
        lo, ro = self.min[2 * nodes], self.min[2 * nodes + 1]
        self.min[nodes] = np.where(lo == 0, ro, np.where(ro == 0, lo, np.minimum(lo, ro)))

    def refresh(self, rows: npt.NDArray[np.int64]) -> None:
        """Recompute every ancestor of the leaves ``rows`` (unique, sorted or not) from its children."""
        nodes = np.unique(np.asarray(rows, dtype=np.int64) + self.base)
        self.min[nodes] = self.sum[nodes]
        while nodes.size and nodes[0] > 1:
            nodes = np.unique(nodes // 2)
            self._recompute(nodes)

    def refresh_range(self, lo: int, hi: int) -> None:
        """Recompute the ancestors of leaves ``lo .. hi - 1`` level by level (a rebuild of that range)."""
        if hi <= lo:
            return
        first, last = lo + self.base, hi - 1 + self.base
        self.min[first : last + 1] = self.sum[first : last + 1]
        while first > 1:
            first, last = first // 2, last // 2
            self._recompute(np.arange(first, last + 1, dtype=np.int64))

    @property
    def total(self) -> float:
        """The sum of the leaves."""
        return float(self.sum[1])

    @property
    def smallest(self) -> float:
        """The smallest positive leaf (0 when every leaf is 0)."""
        return float(self.min[1])

    def find(self, targets: npt.NDArray[np.float64]) -> npt.NDArray[np.int64]:
        """For each target in ``[0, total)``: the leaf whose prefix-sum interval holds it.

        A branch whose sum is 0 is never taken, so rounding cannot land on an empty leaf.
        """
        idx = np.ones(targets.shape, dtype=np.int64)
        u = targets.astype(np.float64, copy=True)
        while idx.size and idx[0] < self.base:
            left = 2 * idx
            left_sum = self.sum[left]
            go_right = ((u >= left_sum) & (self.sum[left + 1] > 0)) | (left_sum == 0)
            u = np.where(go_right, u - left_sum, u)
            idx = np.where(go_right, left + 1, left)
        return idx - self.base

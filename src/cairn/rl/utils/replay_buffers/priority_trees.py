"""The sum tree and min tree over a prioritized buffer's priorities (:class:`PriorityTrees`).

Both trees are :mod:`cairn.rl.execution.segment_tree` trees (RLlib's API, the one home of the
arithmetic): each is one array of ``2 * P`` float64 nodes (``P`` the power of two at or above
``capacity``), leaves at ``P .. P + capacity - 1``. An inner node is always recomputed
from its two children, never updated by a difference, so the trees are a pure function
of the leaves: rebuilt from saved leaves they are the same bits as the trees that were saved.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from cairn.rl.execution.segment_tree import SegmentTree, SumSegmentTree, min_positive

__all__ = ["PriorityTrees"]


class PriorityTrees:
    """A sum tree and a min tree over ``capacity`` leaves; empty leaves are 0 in both.

    The min tree ignores zeros (:func:`~cairn.rl.execution.segment_tree.min_positive`, the min of
    the positive leaves), so both arrays start as ``np.zeros``: pages the buffer never fills cost no
    memory. ``sum`` and ``min`` are the two trees' node arrays.
    """

    def __init__(self, capacity: int) -> None:
        self.base = 1 << max(0, (capacity - 1).bit_length())  # P: the first leaf's node
        self._sum_tree = SumSegmentTree(self.base)
        self._min_tree = SegmentTree(self.base, min_positive, neutral_element=0.0)
        self.sum: npt.NDArray[np.float64] = self._sum_tree.value
        self.min: npt.NDArray[np.float64] = self._min_tree.value

    @property
    def leaves(self) -> npt.NDArray[np.float64]:
        """The leaves of the sum tree (a view: write them, then :meth:`refresh`)."""
        return self.sum[self.base :]

    def refresh(self, rows: npt.NDArray[np.int64]) -> None:
        """Recompute every ancestor of the leaves ``rows`` (unique, sorted or not) from its children."""
        rows = np.asarray(rows, dtype=np.int64)
        nodes = np.unique(rows + self.base)
        self.min[nodes] = self.sum[nodes]
        self._sum_tree.refresh(rows)
        self._min_tree.refresh(rows)

    def refresh_range(self, lo: int, hi: int) -> None:
        """Recompute the ancestors of leaves ``lo .. hi - 1`` level by level (a rebuild of that range)."""
        if hi <= lo:
            return
        self.min[lo + self.base : hi + self.base] = self.sum[lo + self.base : hi + self.base]
        self._sum_tree.refresh_range(lo, hi)
        self._min_tree.refresh_range(lo, hi)

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
        return self._sum_tree.find(targets)

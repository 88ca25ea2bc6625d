"""RLlib's ``ray.rllib.algorithms.callbacks``: ``DefaultCallbacks``, its older name of ``RLlibCallback``.

RLlib 2.60 still ships ``DefaultCallbacks = RLlibCallback`` here, so scripts written for
it import it unchanged; new code uses :class:`~cairn.rl.callbacks.callbacks.RLlibCallback`.
To be removed with RLlib's own alias (when a RLlib release drops it), and not later than
cairn 1.0.
"""

from __future__ import annotations

from cairn.rl.callbacks.callbacks import RLlibCallback

__all__ = ["DefaultCallbacks", "RLlibCallback"]

DefaultCallbacks = RLlibCallback
"""RLlib's older name of :class:`~cairn.rl.callbacks.callbacks.RLlibCallback` (the same class)."""

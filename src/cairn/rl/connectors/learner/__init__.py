"""RLlib's learner connector pieces (``ray.rllib.connectors.learner``) that cairn accepts."""

from __future__ import annotations

from cairn.rl.connectors.learner.frame_stacking import FrameStackingLearner

__all__ = ["FrameStackingLearner"]

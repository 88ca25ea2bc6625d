"""RLlib's ``BaseTestingLearner`` (exported by :mod:`cairn.rl.core.testing.testing_learner`, RLlib's path).

In a module of its own so that the BC learner built on it and the testing config
that names the BC learner do not import each other.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import torch

from cairn.rl.core.learner.learner import Learner

__all__ = ["BaseTestingLearner"]


class BaseTestingLearner(Learner):
    """RLlib's testing learner base: reports each module's mean weight after an update (``mean_weight``)."""

    def compute_metrics_for_module(self, module_id: str, batch: Mapping[str, torch.Tensor]) -> dict[str, float]:
        """The module's mean weight (the mean of its parameters' means), as RLlib's testing learner logs."""
        params = self.get_parameters(self.module[module_id])
        return {"mean_weight": float(np.mean([p.detach().mean().item() for p in params])) if params else 0.0}

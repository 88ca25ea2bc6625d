"""Action distributions built from a module's ``action_dist_inputs`` (RLlib's ``ray.rllib.core.distribution``)."""

from cairn.rl.core.distribution.torch_distribution import (
    TorchCategorical,
    TorchDiagGaussian,
    TorchDistribution,
    action_dist_class_for,
)

__all__ = ["TorchCategorical", "TorchDiagGaussian", "TorchDistribution", "action_dist_class_for"]

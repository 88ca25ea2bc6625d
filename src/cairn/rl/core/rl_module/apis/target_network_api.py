"""RLlib's ``TargetNetworkAPI`` (``ray.rllib.core.rl_module.apis.target_network_api``) and ``make_target_network``.

A module written the RLlib way that keeps target copies of some of its networks
implements it (RLlib's APPO reads them). cairn's own off-policy learners (DQN, SAC) keep
their target modules themselves and do not call these methods; the API is here for
modules and code written against RLlib.
"""

from __future__ import annotations

import abc
import copy
from typing import Any

import torch

__all__ = ["TARGET_NETWORK_ACTION_DIST_INPUTS", "TargetNetworkAPI", "make_target_network"]

TARGET_NETWORK_ACTION_DIST_INPUTS = "target_network_action_dist_inputs"
"""RLlib's key of the action distribution inputs :meth:`TargetNetworkAPI.forward_target` returns."""


def make_target_network(main_net: torch.nn.Module) -> torch.nn.Module:
    """A copy of ``main_net`` (same weights) that takes no gradients (RLlib's ``core.learner.utils`` helper)."""
    target = copy.deepcopy(main_net)
    target.requires_grad_(False)
    return target


class TargetNetworkAPI(abc.ABC):
    """What a module with target networks implements: make them, pair them with their main nets, run them."""

    @abc.abstractmethod
    def make_target_networks(self) -> None:
        """Create the target networks (:func:`make_target_network` of each main net)."""

    @abc.abstractmethod
    def get_target_network_pairs(self) -> list[tuple[torch.nn.Module, torch.nn.Module]]:
        """``(main_net, target_net)`` of each target network, for the learner to sync."""

    @abc.abstractmethod
    def forward_target(self, batch: dict[str, Any]) -> dict[str, Any]:
        """The forward pass through the target networks (RLlib: ``TARGET_NETWORK_ACTION_DIST_INPUTS``)."""

"""ValueFunctionAPI: a module with a value function (RLlib's ``ray.rllib.core.rl_module.apis.ValueFunctionAPI``)."""

from __future__ import annotations

import abc
from collections.abc import Mapping
from typing import Any

import torch

__all__ = ["ValueFunctionAPI"]


class ValueFunctionAPI(abc.ABC):
    """Mix it into a :class:`~cairn.rl.core.rl_module.torch.TorchRLModule` that computes values.

    PPO then takes a module's ``vf_preds`` from :meth:`compute_values`: the env
    runner calls it (without gradients) for the values of sampled and final
    observations, and PPO's learner (with gradients) for the value loss, when the
    module's forward passes return no ``"vf_preds"``.
    """

    @abc.abstractmethod
    def compute_values(self, batch: Mapping[str, Any], embeddings: Any | None = None) -> torch.Tensor:
        """The value estimates ``Tensor[B]`` of ``batch["obs"]``.

        Args:
            batch: The batch (``Columns.OBS``, ...).
            embeddings: What the forward pass returned as ``Columns.EMBEDDINGS``, if
                anything, so that a module sharing layers need not compute them twice.
        """

"""RLlib's ``PPOCatalog`` (``ray.rllib.algorithms.ppo.ppo_catalog``): the networks of PPO's default module.

In RLlib a catalog builds a module's encoder, heads and action distribution from
``model_config``. cairn's :class:`~cairn.rl.algorithms.ppo.default_ppo_rl_module.DefaultPPORLModule`
builds its networks from ``model_config`` itself; ``PPOCatalog`` is its catalog
(``DefaultPPORLModule.default_catalog_class``), so ``RLModuleSpec(catalog_class=PPOCatalog)``,
RLlib's explicit way of asking for the default, is taken. It answers what RLlib's catalog
answers about the module without building it: the action distribution class.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from cairn.rl.core.distribution.torch_distribution import TorchDistribution, action_dist_class_for

__all__ = ["PPOCatalog"]


class PPOCatalog:
    """PPO's default networks for ``observation_space``, ``action_space`` and ``model_config_dict`` (RLlib's).

    Args:
        observation_space: The module's observation space.
        action_space: The module's action space.
        model_config_dict: The module's ``model_config``.
    """

    def __init__(
        self, observation_space: gym.Space[Any], action_space: gym.Space[Any], model_config_dict: dict[str, Any]
    ) -> None:
        self.observation_space = observation_space
        self.action_space = action_space
        self.model_config_dict = dict(model_config_dict)

    def get_action_dist_cls(self, framework: str = "torch") -> type[TorchDistribution]:
        """The action distribution class of the module's outputs (``TorchCategorical``, ``TorchDiagGaussian``).

        Raises:
            ValueError: Another framework than torch, or an action space the default module has no
                distribution for.
        """
        if framework != "torch":
            raise ValueError(f"PPOCatalog.get_action_dist_cls(framework={framework!r}): cairn.rl is torch only.")
        return action_dist_class_for(self.action_space)

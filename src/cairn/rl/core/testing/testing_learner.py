"""RLlib's ``BaseTestingAlgorithmConfig`` and ``BaseTestingLearner`` (``ray.rllib.core.testing.testing_learner``).

A config that trains :class:`~cairn.rl.core.testing.torch.bc_module.DiscreteBCTorchModule`
(``fcnet_hiddens=[32]``) with :class:`~cairn.rl.core.testing.torch.bc_learner.BCTorchLearner`,
and builds one learner from an env (:meth:`BaseTestingAlgorithmConfig.build_learner`), as
RLlib's learner tests use them. Recorded by reference like any config class.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cairn.registry import register_type
from cairn.rl.config.algorithm_config import AlgorithmConfig
from cairn.rl.core import DEFAULT_MODULE_ID
from cairn.rl.core.learner.building import build_learner, build_learner_group
from cairn.rl.core.learner.learner import Learner
from cairn.rl.core.learner.learner_group import LearnerGroup
from cairn.rl.core.rl_module.multi_rl_module import MultiRLModuleSpec
from cairn.rl.core.rl_module.rl_module import RLModuleSpec
from cairn.rl.core.testing.base_testing_learner import BaseTestingLearner

__all__ = ["BaseTestingAlgorithmConfig", "BaseTestingLearner"]


@register_type
@dataclass
class BaseTestingAlgorithmConfig(AlgorithmConfig):
    """RLlib's testing config: the BC learner and module, one learner built from an env."""

    def get_default_learner_class(self) -> type[Any]:
        """:class:`~cairn.rl.core.testing.torch.bc_learner.BCTorchLearner`."""
        from cairn.rl.core.testing.torch.bc_learner import BCTorchLearner

        return BCTorchLearner

    def get_default_rl_module_class(self) -> type[Any]:
        """:class:`~cairn.rl.core.testing.torch.bc_module.DiscreteBCTorchModule`."""
        from cairn.rl.core.testing.torch.bc_module import DiscreteBCTorchModule

        return DiscreteBCTorchModule

    def get_default_rl_module_spec(self) -> RLModuleSpec | MultiRLModuleSpec:
        """The BC module with ``fcnet_hiddens=[32]`` (spaces unset); several policies: one spec for each."""
        spec = RLModuleSpec(module_class=self.get_default_rl_module_class(), model_config={"fcnet_hiddens": [32]})
        if len(self.policies) > 1 or self.policies != (DEFAULT_MODULE_ID,):
            return MultiRLModuleSpec(rl_module_specs={module_id: spec for module_id in self.policies})
        return spec

    def build_learner(self, *, env: Any = None, spaces: Any = None) -> Learner:
        """One learner over this config's module(s) with ``env``'s spaces (RLlib's ``build_learner``)."""
        return build_learner(self, env=env, spaces=spaces)

    def build_learner_group(self, *, env: Any = None, spaces: Any = None) -> LearnerGroup:
        """The learner group over this config's module(s) with ``env``'s spaces (RLlib's ``build_learner_group``)."""
        return build_learner_group(self, env=env, spaces=spaces)

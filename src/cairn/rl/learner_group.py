"""LearnerGroup: the learners of an algorithm; one local Learner for now.

The group is the algorithm's ``learner_group`` component and its one
Learner is the component ``learner``. A Ray version will implement the same
methods (``update``, ``get_weights``, ``get_state``/``set_state``) with
remote learners whose states are equal after every update, so a checkpoint
holds the state of the first learner and restores into any number of them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from cairn import Checkpointable
from cairn.rl._util import Names
from cairn.rl.learner import Learner, TrainBatch
from cairn.rl.rl_module import RLModuleSpec

if TYPE_CHECKING:
    from cairn.rl.ppo import PPOConfig

__all__ = ["LearnerGroup"]


class LearnerGroup(Checkpointable):
    """A group of learners (one local learner).

    Args:
        config: The PPO config; ``num_learners`` must be 0 or 1.
        module_specs: Module id -> spec of each module to train.

    Raises:
        NotImplementedError: ``num_learners`` > 1 (needs Ray, not supported yet).
    """

    def __init__(self, config: PPOConfig, module_specs: Mapping[str, RLModuleSpec]) -> None:
        if config.num_learners > 1:
            raise NotImplementedError(
                f"num_learners={config.num_learners}: more than one learner needs Ray, which "
                "cairn.rl does not support yet (Ray support is coming); use 0 or 1."
            )
        self.config = config
        self.module_specs = dict(module_specs)
        self.learner = Learner(config, self.module_specs)

    @property
    def num_learners(self) -> int:
        """How many learners the group runs (always 1 local learner for now)."""
        return 1

    def update(self, batches: Mapping[str, TrainBatch]) -> dict[str, float]:
        """Update on ``batches`` (module id -> flat batch); returns the learner's metrics."""
        return self.learner.update(batches)

    def get_weights(self) -> dict[str, Any]:
        """Module id -> RLModule state of the (first) learner."""
        return self.learner.get_weights()

    def get_checkpointable_components(self) -> list[tuple[str, Checkpointable]]:
        """``learner``: the local learner."""
        return [("learner", self.learner)]

    def get_state(self, components: Names = None, *, not_components: Names = None, **kwargs: Any) -> dict[str, Any]:
        """``{"learner": learner state}`` for the selected parts."""
        return self._get_components_state(components, not_components=not_components)

    def set_state(self, state: dict[str, Any]) -> None:
        """Forward ``state["learner"]`` to the learner if present."""
        self._set_components_state(state)

    def get_ctor_args_and_kwargs(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """``((config, module_specs), {})``."""
        return (self.config, dict(self.module_specs)), {}

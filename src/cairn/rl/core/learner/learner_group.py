"""LearnerGroup: the learners of an algorithm; one local Learner, or several on Ray.

The group is the algorithm's ``learner_group`` component and its Learner is
the component ``learner``. With ``num_learners`` 0 or 1 the learner trains in
this process. With ``num_learners=N > 1`` there are N data-parallel learners,
Ray actors (:class:`~cairn.rl.distributed.learners.RemoteLearners`), whose
states are identical after every update; the local :attr:`learner` is then
only the shape of the checkpoint (class, constructor, components) and is not
trained. A checkpoint holds one learner's state and restores into any number
of learners: learner 0 writes ``learner/`` itself, and on restore every
learner reads it in parallel.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from cairn import Checkpointable
from cairn.rl._aliases import register_old_paths
from cairn.rl.algorithms.algorithm_config import AlgorithmConfig
from cairn.rl.core.learner.learner import Learner, TrainBatch
from cairn.rl.core.rl_module.rl_module import RLModule, RLModuleSpec
from cairn.rl.utils._util import Names

if TYPE_CHECKING:
    from cairn.rl.distributed.checkpoint import RemotePart
    from cairn.rl.distributed.learners import RemoteLearners

__all__ = ["LearnerGroup"]


class LearnerGroup(Checkpointable):
    """A group of learners: one local learner, or ``num_learners`` > 1 on Ray.

    Args:
        config: The algorithm's config; its ``get_default_learner_class()`` is the learner built.
        module_specs: Module id -> spec of each module to train.

    Raises:
        ValueError: ``num_learners`` > 1 and Ray is not installed (the message
            says ``pip install 'cairn-rl[ray]'``).
    """

    # The layout of this class's own state; raise it (and implement upgrade_state) when it changes.
    STATE_VERSION = 1

    def __init__(self, config: AlgorithmConfig, module_specs: Mapping[str, RLModuleSpec]) -> None:
        self.config = config
        self.module_specs = dict(module_specs)
        self.learner: Learner = config.get_default_learner_class()(config, self.module_specs)
        self.remote: RemoteLearners | None = None
        if int(config.num_learners) > 1:
            from cairn.rl.distributed.learners import RemoteLearners

            self.remote = RemoteLearners(config, self.module_specs)

    @property
    def num_learners(self) -> int:
        """How many learners the group runs."""
        return len(self.remote.actors) if self.remote is not None else 1

    def update(self, batches: Mapping[str, TrainBatch]) -> dict[str, float]:
        """Update on ``batches`` (module id -> flat batch); returns the (first) learner's metrics."""
        if self.remote is not None:
            return self.remote.update(batches)
        return self.learner.update(batches)

    def get_weights(self) -> dict[str, Any]:
        """Module id -> RLModule state of the (first) learner."""
        if self.remote is not None:
            return self.remote.get_weights()
        return self.learner.get_weights()

    def get_weights_ref(self) -> dict[str, Any] | Any:
        """The weights for a broadcast: a Ray object reference when the learners are remote, else the dict."""
        if self.remote is not None:
            return self.remote.get_weights_ref()
        return self.learner.get_weights()

    def get_module(self, module_id: str) -> RLModule:
        """The module ``module_id`` with the current weights (fetched from learner 0 when remote)."""
        module = self.learner.module[module_id]
        if self.remote is not None:
            module.set_state(self.get_weights()[module_id])
        return module

    def close(self) -> None:
        """Stop the remote learners, if any."""
        if self.remote is not None:
            self.remote.close()

    # ------------------------------------------------------------------ Checkpointable

    def get_checkpointable_components(self) -> list[tuple[str, Checkpointable]]:
        """``learner``: the local learner (with remote learners, the shape of their state)."""
        return [("learner", self.learner)]

    def remote_checkpoint_parts(self) -> dict[str, RemotePart]:
        """``{"learner": the remote learners}`` when remote: they write and read that folder."""
        return {"learner": self.remote} if self.remote is not None else {}

    def get_state(self, components: Names = None, *, not_components: Names = None, **kwargs: Any) -> dict[str, Any]:
        """``{"learner": learner state}`` for the selected parts (learner 0's when remote)."""
        if self.remote is not None:
            if not self._check_component("learner", components, not_components):
                return {}
            return {
                "learner": self.remote.get_state(
                    self._get_subcomponents("learner", components),
                    self._get_not_subcomponents("learner", not_components),
                )
            }
        return self._get_components_state(components, not_components=not_components)

    def set_state(self, state: dict[str, Any]) -> None:
        """Forward ``state["learner"]`` to the learner(s) if present."""
        if self.remote is not None:
            if "learner" in state:
                self.remote.set_state(state["learner"])
            return
        self._set_components_state(state)

    def get_ctor_args_and_kwargs(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """``((config, module_specs), {})``."""
        return (self.config, dict(self.module_specs)), {}

    def save_to_path(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        state: dict[str, Any] | None = None,
        filesystem: Any = None,
        allow_pickle: bool = False,
    ) -> str:
        """As :meth:`cairn.Checkpointable.save_to_path`; remote learners write their folder themselves."""
        if self.remote is not None and state is None:
            from cairn.rl.distributed import checkpoint

            return checkpoint.save(self, path, filesystem=filesystem, allow_pickle=allow_pickle)
        return super().save_to_path(path, state=state, filesystem=filesystem, allow_pickle=allow_pickle)

    def _restore_checkpoint(
        self,
        path: str | os.PathLike[str],
        *,
        component: str | None,
        filesystem: Any,
        allow_pickle: bool,
        built_from: bytes | None,
    ) -> None:
        """As :meth:`cairn.Checkpointable.restore_from_path`; remote learners read their folder themselves."""
        if self.remote is not None:
            from cairn.rl.distributed import checkpoint

            checkpoint.restore(self, path, component=component, filesystem=filesystem, allow_pickle=allow_pickle)
            return
        super()._restore_checkpoint(
            path, component=component, filesystem=filesystem, allow_pickle=allow_pickle, built_from=built_from
        )


register_old_paths(LearnerGroup)

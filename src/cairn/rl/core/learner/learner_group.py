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
    from cairn.delegation import DelegatedComponent
    from cairn.manifest import FileEntry
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

            self.remote = RemoteLearners(config, self.module_specs, local=self.learner)

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

    def add_module(
        self,
        module_id: str,
        module_spec: RLModuleSpec | RLModule,
        *,
        config_overrides: Mapping[str, Any] | None = None,
    ) -> RLModule:
        """Add a module to every learner (RLlib's ``LearnerGroup.add_module``); returns the local one.

        The local learner builds it (or takes the module given); remote learners
        build the same spec and take the same weights, so they stay identical. The
        group records the new set of modules and overrides, so that a checkpoint's
        ``from_checkpoint`` rebuilds exactly them.

        Args:
            module_id: The new module's id.
            module_spec: A spec (its class defaults to the algorithm's module) or a module.
            config_overrides: The module's own settings (``{"lr": 1e-3}``).
        """
        module = self.learner.add_module(module_id, module_spec, config_overrides=config_overrides)
        self.config = self.learner.config
        self.module_specs = self.learner.module_specs
        if self.remote is not None:
            self.remote.add_module(module_id, module.spec, config_overrides, module.get_state())
        return module

    def remove_module(self, module_id: str) -> RLModule:
        """Remove a module from every learner (its optimizer and overrides too); returns the local one.

        Raises:
            KeyError: No such module.
        """
        module = self.learner.remove_module(module_id)
        self.config = self.learner.config
        self.module_specs = self.learner.module_specs
        if self.remote is not None:
            self.remote.remove_module(module_id)
        return module

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

    def get_delegated_components(self) -> dict[str, DelegatedComponent]:
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

    def _restore_checkpoint(
        self,
        path: str | os.PathLike[str],
        *,
        component: str | None,
        filesystem: Any,
        allow_pickle: bool,
        built_from: bytes | None,
        signed_root: FileEntry | None = None,
    ) -> None:
        """Restore as :meth:`cairn.Checkpointable.restore_from_path`; a failed ``from_checkpoint`` stops the actors.

        ``from_checkpoint`` drops the group it built when the restore fails (or retries
        it on a new group after a race with an overwrite): its remote learners must not
        outlive it.
        """
        try:
            super()._restore_checkpoint(
                path,
                component=component,
                filesystem=filesystem,
                allow_pickle=allow_pickle,
                built_from=built_from,
                signed_root=signed_root,
            )
        except BaseException:
            if built_from is not None:
                self.close()
            raise

    def get_ctor_args_and_kwargs(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """``((config, module_specs), {})`` of the modules trained now (after add_module / remove_module)."""
        return (self.config, dict(self.module_specs)), {}


register_old_paths(LearnerGroup)

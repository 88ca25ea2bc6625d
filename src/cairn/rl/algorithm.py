"""Algorithm: the root of an RL checkpoint tree.

Components (SPEC section 5)::

    env_runner/                 the local EnvRunner (connectors, RNG, env state, counters)
      env_to_module_connector/
      module_to_env_connector/
    learner_group/
      learner/                  optimizers, RNG, counters
        rl_module/              the MultiRLModule
          default_policy/       one RLModule

The env runner's own copy of the module is not saved (as in RLlib): the
learner's module is the source of truth, and after every restore (full or partial, also with
``component=``) the algorithm copies the learner's weights to the env runners
so they act with the restored weights at once.

With remote env runners or learners (``num_env_runners > 0``, ``num_learners >
1``, on Ray) the tree is the same; the groups' actors write and read their own
folders in parallel, as delegates of the engine (:mod:`cairn.delegation`,
:mod:`cairn.rl.distributed.checkpoint`).
"""

from __future__ import annotations

import abc
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import torch

from cairn import Checkpointable
from cairn.registry import register_type
from cairn.rl._util import Names
from cairn.rl.env_runner import EnvRunner
from cairn.rl.env_runner_group import EnvRunnerGroup
from cairn.rl.learner_group import LearnerGroup
from cairn.rl.multi_agent import check_env_config, check_env_id
from cairn.rl.multi_rl_module import DEFAULT_MODULE_ID
from cairn.rl.rl_module import RLModule

if TYPE_CHECKING:
    from cairn.delegation import DelegatedComponent

__all__ = ["Algorithm", "AlgorithmConfig"]


@register_type
@dataclass
class AlgorithmConfig:
    """Settings every algorithm shares: the environment, sampling, modules, scale."""

    env: str = "CartPole-v1"
    """A gymnasium environment id, or ``"multi:<id>"`` for ``num_agents`` independent
    copies of it, one per agent (``"agent_0"`` .. ``"agent_{n-1}"``)."""

    env_config: dict[str, Any] = field(default_factory=dict)
    """Keyword arguments for ``gymnasium.make``."""

    num_agents: int = 2
    """Number of agents of a ``"multi:"`` environment; ignored otherwise."""

    seed: int = 0
    """Seeds everything: environments, module initialisation, action sampling,
    minibatch shuffling. Same seed on CPU, same results, bit for bit."""

    num_env_runners: int = 0
    """Number of remote env runners (Ray actors) that sample in parallel. 0: one
    runner samples in this process. More than 0 needs Ray
    (``pip install 'cairn-rl[ray]'``)."""

    num_envs_per_env_runner: int = 4
    """Vectorized environments (for ``"multi:"`` envs: env copies) per env runner."""

    rollout_length: int = 128
    """Steps each sub-environment takes per training iteration."""

    num_learners: int = 0
    """Number of learners. 0 and 1 both mean one learner in this process; more are
    data-parallel Ray actors (``pip install 'cairn-rl[ray]'``)."""

    num_cpus_per_env_runner: float = 0.0
    """CPUs Ray reserves for each remote env runner. 0 lets any number of actors
    share the machine; set 1 on a cluster so that Ray spreads them."""

    num_cpus_per_learner: float = 0.0
    """CPUs Ray reserves for each remote learner (see ``num_cpus_per_env_runner``)."""

    model_config: dict[str, Any] = field(default_factory=dict)
    """Overrides of ``cairn.rl.rl_module.DEFAULT_MODEL_CONFIG`` (hidden_sizes,
    activation, log_std_init), the same for every module."""

    policies: tuple[str, ...] = (DEFAULT_MODULE_ID,)
    """The module ids, one RLModule (and one optimizer) each."""

    policy_mapping: dict[str, str] | None = None
    """Agent id -> module id. ``None`` maps every agent to the only policy."""

    observation_filter: str | None = "MeanStdFilter"
    """Observation filter of the env runners' ``env_to_module_connector``
    (``"MeanStdFilter"`` or ``None``)."""

    episode_return_window: int = 100
    """``episode_return_mean`` is the mean over this many most recent episodes."""

    num_torch_threads: int | None = 1
    """Applied with ``torch.set_num_threads`` when the algorithm is built (results
    are bit-for-bit reproducible for one thread count); ``None`` leaves it alone."""

    def __post_init__(self) -> None:
        # A config rebuilt from a checkpoint is checked here, before anything makes its
        # environment: gymnasium would import the module an id like "this:CartPole-v1" names,
        # or pygame for render_mode="human" in env_config.
        check_env_id(self.env)
        check_env_config(self.env_config)

    def validate(self) -> None:
        """Raise ``ValueError`` when a setting is out of range, the env id names a module the
        program has not imported, or a setting asks for Ray and Ray is not installed."""
        check_env_id(self.env)
        check_env_config(self.env_config)
        for name in ("num_envs_per_env_runner", "rollout_length", "episode_return_window"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}.")
        if self.num_env_runners < 0 or self.num_learners < 0:
            raise ValueError("num_env_runners and num_learners must be >= 0.")
        if self.num_cpus_per_env_runner < 0 or self.num_cpus_per_learner < 0:
            raise ValueError("num_cpus_per_env_runner and num_cpus_per_learner must be >= 0.")
        if self.num_env_runners > 0 or self.num_learners > 1:
            from cairn.rl.distributed._ray import RAY_EXTRA_HINT, ray_available

            if not ray_available():
                what = (
                    f"num_env_runners={self.num_env_runners}"
                    if self.num_env_runners > 0
                    else f"num_learners={self.num_learners}"
                )
                raise ValueError(
                    f"{what} runs env runners or learners as Ray actors, but Ray is not installed. "
                    f"Install the extra: {RAY_EXTRA_HINT}, or use num_env_runners=0 and num_learners<=1."
                )


class Algorithm(Checkpointable, abc.ABC):
    """Base of RL algorithms: an env runner group, a learner group, an iteration counter.

    Subclasses implement :meth:`training_step` and :meth:`build_learner_group`.

    Args:
        config: The algorithm's config (an instance of :attr:`config_class`).
    """

    # The layout of this class's own state; raise it (and implement upgrade_state) when it changes.
    STATE_VERSION = 1

    config_class: ClassVar[type[AlgorithmConfig]] = AlgorithmConfig

    def __init__(self, config: AlgorithmConfig) -> None:
        if not isinstance(config, self.config_class):
            raise TypeError(f"{type(self).__name__} needs a {self.config_class.__name__}, got {type(config).__name__}.")
        config.validate()
        self.config = config
        if config.num_torch_threads is not None:
            torch.set_num_threads(int(config.num_torch_threads))
        self.env_runner_group = EnvRunnerGroup(config)
        self.learner_group = self.build_learner_group(config, self.env_runner_group.local_env_runner.module_specs)
        self.training_iteration = 0
        self._num_syncs = 0
        self._sync_env_runners()

    @abc.abstractmethod
    def build_learner_group(self, config: Any, module_specs: Mapping[str, Any]) -> LearnerGroup:
        """Build the learner group for ``config`` and the modules of ``module_specs``."""

    @abc.abstractmethod
    def training_step(self) -> dict[str, Any]:
        """One iteration of sampling and learning; returns its metrics."""

    @property
    def env_runner(self) -> EnvRunner:
        """The local env runner."""
        return self.env_runner_group.local_env_runner

    def get_module(self, module_id: str = DEFAULT_MODULE_ID) -> RLModule:
        """The learner's module ``module_id`` (the weights being trained; fetched when remote)."""
        return self.learner_group.get_module(module_id)

    def train(self) -> dict[str, Any]:
        """Run one training iteration.

        Returns:
            Metrics: ``training_iteration``, ``num_env_steps_sampled_lifetime``,
            ``episode_return_mean`` and more, among them ``"learner/<module id>/..."``.
            Keys under ``"perf/"`` are wall-clock measurements (not reproducible).
        """
        start = time.perf_counter()
        steps_before = self.env_runner.num_env_steps_sampled_lifetime
        results = self.training_step()
        self.training_iteration += 1
        elapsed = time.perf_counter() - start
        steps = self.env_runner.num_env_steps_sampled_lifetime - steps_before
        results["training_iteration"] = self.training_iteration
        results["num_env_steps_sampled"] = steps
        results["perf/iteration_time_s"] = elapsed
        results["perf/env_steps_per_second"] = steps / elapsed if elapsed > 0 else float("nan")
        return dict(sorted(results.items()))

    def _sync_env_runners(self) -> None:
        """Spread the local runner's state and the learner's weights to the env runners."""
        self._num_syncs += 1
        self.env_runner_group.sync_local_state_to_others()
        self.env_runner_group.sync_weights(self.learner_group.get_weights_ref())

    def stop(self) -> None:
        """Release the environments and stop the remote actors, if any."""
        self.env_runner_group.close()
        self.learner_group.close()

    # ------------------------------------------------------------------ Checkpointable

    def get_checkpointable_components(self) -> list[tuple[str, Checkpointable]]:
        """``env_runner`` (the local runner) and ``learner_group``."""
        return [("env_runner", self.env_runner), ("learner_group", self.learner_group)]

    def get_delegated_components(self) -> dict[str, DelegatedComponent]:
        """``{"env_runner": the remote runners}`` when there are some: runner 1 writes that folder."""
        remote = self.env_runner_group.remote
        return {"env_runner": remote} if remote is not None else {}

    def get_state(self, components: Names = None, *, not_components: Names = None, **kwargs: Any) -> dict[str, Any]:
        """``training_iteration`` plus the states of the selected components."""
        self.env_runner_group.sync_connector_states_to_local()
        state = {
            "training_iteration": self.training_iteration,
            **self._get_components_state(components, not_components=not_components),
        }
        if "env_runner" in state:  # remote runners: their RNGs and environments
            state["env_runner"].update(self.env_runner_group.get_runner_states())
        return state

    def set_state(self, state: dict[str, Any]) -> None:
        """Apply ``state`` (missing parts are left as they are), then sync the env runners."""
        self._set_components_state(state)
        if "env_runner" in state:
            self.env_runner_group.set_runner_states(state["env_runner"])
        if "training_iteration" in state:
            self.training_iteration = int(state["training_iteration"])
        self._sync_env_runners()

    def _restore_checkpoint(
        self,
        path: str | os.PathLike[str],
        *,
        component: str | None,
        filesystem: Any,
        allow_pickle: bool,
        built_from: bytes | None,
    ) -> None:
        """Restore as :meth:`cairn.Checkpointable.restore_from_path`, then sync the env runners.

        After a partial restore (``component="learner_group/learner/rl_module/p1"``)
        the env runners act with the restored weights at once. With remote env
        runners or learners, the actors read their folders themselves, in parallel,
        and nothing is applied anywhere until every part was read and verified
        (the engine's delegation, :mod:`cairn.delegation`).
        """
        syncs_before = self._num_syncs
        super()._restore_checkpoint(
            path, component=component, filesystem=filesystem, allow_pickle=allow_pickle, built_from=built_from
        )
        if self._num_syncs == syncs_before:  # set_state of the whole algorithm already synced
            self._sync_env_runners()

    def get_ctor_args_and_kwargs(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """``((config,), {})``."""
        return (self.config,), {}

    def get_metadata(self) -> dict[str, Any]:
        """Adds the env id and the training iteration."""
        metadata = dict(super().get_metadata())
        metadata.update(
            {
                "env": self.config.env,
                "training_iteration": self.training_iteration,
                "episodes_restart_on_restore": not self.env_runner.env_state_saved,
            }
        )
        return metadata

"""Algorithm: the root of an RL checkpoint tree.

Components (SPEC section 5)::

    env_runner/                 the local EnvRunner (connectors, RNG, env state, counters)
      env_to_module_connector/
      module_to_env_connector/
    eval_env_runner/            the local evaluation runner, when the config asks for evaluation
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
import time
from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any, ClassVar, Self

import torch

from cairn import Checkpointable
from cairn._ctor_bounds import FolderSizes
from cairn._unrecorded import supplying
from cairn.errors import IncompatibleCheckpointError
from cairn.rl._aliases import register_old_paths
from cairn.rl.algorithms.config_bounds import machine_problem, modules_problem
from cairn.rl.algorithms.evaluation import EvaluationRunners, evaluation_runner_config, wants_evaluation_runners
from cairn.rl.algorithms.module_changes import ModuleChanges
from cairn.rl.algorithms.results import ResultDict, merge_training_step_results, nest_results, settings_view
from cairn.rl.callbacks.callbacks import callbacks_from_config
from cairn.rl.config.algorithm_config import CALLABLE_FIELDS, DEFAULT_MODULE_ID, AlgorithmConfig
from cairn.rl.config.env_creators import ENV_ROLE
from cairn.rl.config.setting_checks import MULTI_AGENT_PREFIX
from cairn.rl.core.learner.learner_group import LearnerGroup
from cairn.rl.core.rl_module.multi_rl_module import (
    load_module_state,
    load_state_paths,
    without_load_state_paths,
)
from cairn.rl.core.rl_module.rl_module import RLModule
from cairn.rl.env.env_runner import EnvRunner
from cairn.rl.env.env_runner_group import EnvRunnerGroup
from cairn.rl.env.multi_agent_env_runner import MultiAgentEnvRunner
from cairn.rl.utils._util import Names
from cairn.rl.utils.metrics.constants import (
    ENV_RUNNER_RESULTS,
    EVALUATION_RESULTS,
    NUM_AGENT_STEPS_SAMPLED_LIFETIME,
    NUM_ENV_STEPS_SAMPLED,
    NUM_ENV_STEPS_SAMPLED_LIFETIME,
    NUM_EPISODES_LIFETIME,
    NUM_TRAINING_STEP_CALLS_PER_ITERATION,
    TIMERS,
    TRAINING_ITERATION_TIMER,
)
from cairn.rl.utils.metrics.metrics_logger import MetricsLogger, flatten_metrics
from cairn.rl.utils.metrics.metrics_logger import read_state as read_metrics_state
from cairn.rl.utils.metrics.stats import LifetimeSumStats
from cairn.state_checks import Schema, check_state_tree, count

if TYPE_CHECKING:
    from cairn.delegation import DelegatedComponent

__all__ = ["Algorithm", "AlgorithmConfig"]


class Algorithm(Checkpointable, ModuleChanges, abc.ABC):
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
        if config.restart_failed_sub_environments:
            raise ValueError(
                f"{type(config).__name__}.fault_tolerance(restart_failed_sub_environments=True) is refused by the "
                "algorithms: their env runners checkpoint their rollouts and env states, and a runner whose env "
                "fails is restarted as a whole (restart_failed_env_runners). SingleAgentEnvRunner (RLlib's API, "
                "cairn.rl.env.single_agent_env_runner) honours it."
            )
        self.config = config
        self.callbacks = callbacks_from_config(config)
        self.metrics = MetricsLogger(root=True)
        """The algorithm's metrics (the root logger): its callbacks' and, under ``env_runners/``, the env runners'."""
        if config.num_torch_threads is not None:
            torch.set_num_threads(int(config.num_torch_threads))
        self.env_runner_group = EnvRunnerGroup(config)
        self.eval_runners: EvaluationRunners | None = None
        """The evaluation env runners, when the config asks for them (``evaluation_interval`` or
        ``evaluation_num_env_runners``); their group is :attr:`eval_env_runner_group`."""
        try:
            if wants_evaluation_runners(config):
                self.eval_runners = EvaluationRunners(config)
            module_specs = self.env_runner_group.local_env_runner.module_specs
            self.learner_group = self.build_learner_group(config, module_specs)
            start_paths = load_state_paths(config)
            if start_paths:  # load_state_path: the modules start from those checkpoints (verified, no pickle)
                weights = {
                    module_id: load_module_state(module_specs[module_id], path)
                    for module_id, path in start_paths.items()
                }
                self.learner_group.set_state({"learner": {"rl_module": weights}})
            self.training_iteration = 0
            self._last_evaluation: dict[str, Any] | None = None  # for always_attach_evaluation_results
            self._sync_env_runners()
            self.callbacks.on_algorithm_init(algorithm=self, metrics_logger=self.metrics)
        except BaseException:
            # Nobody holds this algorithm: its Ray actors would live on, unreachable, until Ray shuts down.
            self.stop()
            raise

    @classmethod
    def default_resource_request(cls, config: AlgorithmConfig) -> Any:
        """What a Tune trial of this algorithm reserves: a ``ray.tune.PlacementGroupFactory`` (RLlib's method).

        One bundle for the algorithm's process (``num_cpus_for_main_process``), one per remote
        env runner (``num_cpus_per_env_runner``, ``custom_resources_per_env_runner``), one per
        evaluation env runner, one per remote learner (``num_cpus_per_learner``,
        ``num_gpus_per_learner``, ``custom_resources_per_learner``), with ``placement_strategy``.
        Each actor the algorithm starts inside the trial takes its own bundle
        (:mod:`cairn.rl.distributed.placement`). Actors that reserve nothing get no bundle.
        Use it as ``tune.with_resources(trainable, PPO.default_resource_request(config))``.

        Raises:
            ValueError: The config is invalid (checked as when an algorithm is built).
        """
        from ray.tune import PlacementGroupFactory

        from cairn.rl.distributed.placement import resource_bundles

        config.validate()
        evaluation = evaluation_runner_config(config) if wants_evaluation_runners(config) else None
        bundles = resource_bundles(config, evaluation=evaluation)
        return PlacementGroupFactory([b.resources for b in bundles], strategy=config.placement_strategy)

    @classmethod
    def get_default_config(cls) -> AlgorithmConfig:
        """A new config of this algorithm with its defaults (RLlib's ``Algorithm.get_default_config``)."""
        return cls.config_class()

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

    @property
    def eval_env_runner_group(self) -> EnvRunnerGroup | None:
        """The evaluation env runners' group (RLlib's name), or ``None`` without evaluation."""
        return None if self.eval_runners is None else self.eval_runners.group

    @property
    def eval_env_runner(self) -> EnvRunner | None:
        """The local evaluation env runner (the ``eval_env_runner`` component), or ``None``."""
        return None if self.eval_runners is None else self.eval_runners.local_env_runner

    @property
    def iteration(self) -> int:
        """The number of :meth:`train` calls so far, restored with a checkpoint (RLlib's name of
        :attr:`training_iteration`)."""
        return self.training_iteration

    def get_module(self, module_id: str = DEFAULT_MODULE_ID) -> RLModule:
        """The learner's module ``module_id`` with the weights being trained (RLlib's ``get_module``).

        With a local learner (``num_learners`` <= 1) it is the live module the learner
        trains: what you change in it (``load_state_dict``) is trained on. With remote
        learners (``num_learners`` > 1, Ray actors) the live modules are in other
        processes: it is then the driver's copy, refreshed with learner 0's weights at
        this call, and changes to it stay in the driver (give new weights with
        ``algo.learner_group.set_state``). Call it again after :meth:`train` for newer weights.
        """
        return self.learner_group.get_module(module_id)

    def train(self) -> ResultDict:
        """Run one training iteration, and an evaluation when ``evaluation_interval`` says so.

        Returns:
            RLlib's nested result (:class:`~cairn.rl.algorithms.results.ResultDict`):
            ``env_runners/...`` (episode statistics, step counters, what the env runners'
            callbacks logged), ``learners/<module id>/...`` and ``learners/__all_modules__/...``,
            ``timers/training_iteration`` (wall clock), ``evaluation/env_runners/...`` in
            iterations that evaluated, ``training_iteration``, ``num_env_steps_sampled_lifetime``,
            and every other value of :attr:`metrics` (what callbacks logged) at its key.
            The keys are the constants of :mod:`cairn.rl.utils.metrics`; lookups also take a
            ``"/"``-joined path (``result["env_runners/episode_return_mean"]``), and
            ``result.flatten()`` gives ``"/"``-joined keys.
            ``timers/`` and ``perf/`` are wall-clock measurements (not reproducible).
            ``fault_tolerance`` (``num_healthy_workers``, ``num_remote_worker_restarts``: remote
            env runners) and ``config`` (the settings, ``config.to_dict()`` as JSON data: classes and
            functions by their ``"module:qualname"``; metrics logs, trackers and ``flatten()`` leave
            it out) are RLlib's. The callbacks' ``on_train_result`` sees the
            result last and may change it.
        """
        start = time.perf_counter()
        steps_before = self.env_runner.num_env_steps_sampled_lifetime
        training_results: dict[str, Any] = {}
        calls = 0
        # RLlib's min_sample_timesteps_per_iteration: training steps until that many steps (counted as
        # count_steps_by says) were sampled in this iteration.
        counter = "num_agent_steps_sampled_lifetime" if self.config.count_steps_by == "agent_steps" else None
        first = getattr(self.env_runner, counter or "num_env_steps_sampled_lifetime")
        while True:
            sampled_before = getattr(self.env_runner, counter or "num_env_steps_sampled_lifetime")
            try:
                training_results = merge_training_step_results(training_results, self.training_step())
            finally:  # also when no runner delivered (EnvRunnersUnavailableError): replacements may be up
                self._report_recreated_env_runners()
            calls += 1
            sampled = getattr(self.env_runner, counter or "num_env_steps_sampled_lifetime")
            if sampled - first >= self.config.min_sample_timesteps_per_iteration or sampled == sampled_before:
                break
        self.training_iteration += 1
        # The env runners' metrics are reduced into the algorithm's logger each iteration (as in RLlib).
        self.metrics.aggregate(self.env_runner_group.pop_metrics(), key=ENV_RUNNER_RESULTS)
        self._log_env_runner_counters()
        interval = self.config.evaluation_interval
        evaluation = None
        if interval is not None and self.training_iteration % int(interval) == 0:
            evaluation = self._last_evaluation = self._run_evaluation()
        elif self.config.always_attach_evaluation_results:
            evaluation = self._last_evaluation
        # The logger keeps the evaluation's stats between evaluations (reduced to NaN when none ran); a result
        # carries evaluation results only as above: when this iteration evaluated, or always_attach asks.
        compiled = flatten_metrics(self.metrics.compile())
        flat = {k: v for k, v in compiled.items() if not k.startswith(f"{EVALUATION_RESULTS}/")}
        flat.update(training_results)
        elapsed = time.perf_counter() - start
        steps = self.env_runner.num_env_steps_sampled_lifetime - steps_before
        flat["training_iteration"] = self.training_iteration
        flat[f"{ENV_RUNNER_RESULTS}/{NUM_ENV_STEPS_SAMPLED}"] = steps
        # RLlib has the lifetime count at the top as well as under env_runners.
        flat[NUM_ENV_STEPS_SAMPLED_LIFETIME] = self.env_runner.num_env_steps_sampled_lifetime
        flat[NUM_TRAINING_STEP_CALLS_PER_ITERATION] = calls
        flat[f"{TIMERS}/{TRAINING_ITERATION_TIMER}"] = elapsed
        flat["perf/env_steps_per_second"] = steps / elapsed if elapsed > 0 else float("nan")
        if evaluation is not None:
            flat.update({f"{EVALUATION_RESULTS}/{k}": v for k, v in evaluation.items()})
        results = nest_results(flat, single_agent_module=self._single_agent_module())
        # RLlib's result also carries its fault-tolerance counts and (as Tune's does) the config's settings.
        results["fault_tolerance"] = self.env_runner_group.fault_tolerance_stats()
        results["config"] = settings_view(self.config.to_dict())
        self.callbacks.on_train_result(algorithm=self, metrics_logger=self.metrics, result=results)
        return results

    def _report_recreated_env_runners(self) -> None:
        """Call ``on_env_runners_recreated`` for the replaced remote runners that came up (RLlib's hook)."""
        groups = [(self.env_runner_group, False)]
        if self.eval_env_runner_group is not None:
            groups.append((self.eval_env_runner_group, True))
        for group, is_evaluation in groups:
            indices = group.pop_recreated()
            if indices:
                self.callbacks.on_env_runners_recreated(
                    algorithm=self, env_runner_group=group, env_runner_indices=indices, is_evaluation=is_evaluation
                )

    def _log_env_runner_counters(self) -> None:
        """The env runners' lifetime counters into :attr:`metrics` under ``env_runners/`` (RLlib's
        ``algo.metrics.peek((ENV_RUNNER_RESULTS, NUM_ENV_STEPS_SAMPLED_LIFETIME))``); checkpointed with it."""
        runner = self.env_runner
        for name, value in (
            (NUM_ENV_STEPS_SAMPLED_LIFETIME, runner.num_env_steps_sampled_lifetime),
            (NUM_AGENT_STEPS_SAMPLED_LIFETIME, runner.num_agent_steps_sampled_lifetime),
            (NUM_EPISODES_LIFETIME, runner.num_episodes_lifetime),
        ):
            key = (ENV_RUNNER_RESULTS, name)
            if key in self.metrics and not isinstance(self.metrics.stats[ENV_RUNNER_RESULTS][name], LifetimeSumStats):
                # Checkpoints of cairn 0.x before the RLlib 2.60 logger recorded the counters as maxima.
                self.metrics.delete(*key)
            # A root lifetime sum is never cleared: log the increase, the stat holds the count.
            increase = int(value) - int(self.metrics.peek(key, default=0))
            self.metrics.log_value(key, increase, reduce="lifetime_sum")

    def _env_runner_results(self) -> dict[str, Any]:
        """The env runners' episode statistics and counters at their result paths (``env_runners/...``)."""
        return {f"{ENV_RUNNER_RESULTS}/{k}": v for k, v in self.env_runner_group.get_metrics().items()}

    def _single_agent_module(self) -> str | None:
        """The module id when one agent plays one module (a gymnasium env), else None."""
        single = not isinstance(self.env_runner, MultiAgentEnvRunner) and len(self.config.policies) == 1
        return self.config.policies[0] if single and not self.config.env.startswith(MULTI_AGENT_PREFIX) else None

    def evaluate(self) -> ResultDict:
        """Run one evaluation now (RLlib's ``Algorithm.evaluate``), with the learners' current weights.

        The evaluation runners (``config.evaluation(...)``) sample ``evaluation_duration``
        episodes or timesteps with ``evaluation_config`` applied (``{"explore": False}``:
        greedy actions). Their state is the checkpoint component ``eval_env_runner``.

        Returns:
            ``{"env_runners": {"episode_return_mean": ..., "num_episodes": ..., ...}}``, as RLlib's
            (what ``train()`` puts under ``result["evaluation"]`` in iterations that evaluate).

        Raises:
            ValueError: The config asks for no evaluation runners.
        """
        return nest_results(self._run_evaluation())

    def _run_evaluation(self) -> dict[str, Any]:
        """One evaluation: ``"env_runners/..."`` results (with what the evaluation runners' callbacks logged) and
        what ``on_evaluate_end`` added, flattened with ``/``."""
        if self.eval_runners is None:
            raise ValueError(
                "This algorithm has no evaluation runners: build it with config.evaluation(evaluation_interval=N) "
                "(train() evaluates every N iterations) or evaluation_num_env_runners=M > 0, then call evaluate()."
            )
        self.callbacks.on_evaluate_start(algorithm=self, metrics_logger=self.metrics)
        # The training runners' merged connector states (observation filter): evaluation normalises as training does.
        self.env_runner_group.sync_connector_states_to_local()
        evaluation = self.eval_runners.run(
            self.get_weights_for_env_runners(),
            self.env_runner.get_connector_states(),
            single_agent_module=self._single_agent_module(),
        )
        key = (EVALUATION_RESULTS, ENV_RUNNER_RESULTS)
        self.metrics.aggregate(self.eval_runners.pop_metrics(), key=key)
        logged = flatten_metrics(self.metrics.peek(key, default={}))
        results = {**logged, **flatten_metrics(evaluation)}
        # RLlib's hook sees the evaluation's results nested, as evaluate() returns them; what it adds is kept.
        nested = nest_results({f"{ENV_RUNNER_RESULTS}/{k}": v for k, v in results.items()})
        self.callbacks.on_evaluate_end(algorithm=self, metrics_logger=self.metrics, evaluation_metrics=nested)
        return flatten_metrics(nested)

    def _sync_env_runners(self) -> None:
        """Spread the local runner's state and the learner's weights to the env runners."""
        self.env_runner_group.sync_local_state_to_others()
        self.env_runner_group.sync_weights(self.get_weights_for_env_runners())

    def get_weights_for_env_runners(self) -> dict[str, Any] | Any:
        """What :meth:`train` and every restore send to the env runners: the learners' weights.

        An algorithm whose env runners need more than the weights (DQN: the
        current exploration epsilon) overrides it; the result is a
        module id -> RLModule state dict, or a Ray object reference to one.
        """
        return self.learner_group.get_weights_ref()

    def restore(self, path: Any, **kwargs: Any) -> None:
        """RLlib's ``Algorithm.restore(path)``: :meth:`restore_from_path` (same arguments)."""
        self.restore_from_path(path, **kwargs)

    def save(self, checkpoint_dir: str | None = None) -> str:
        """RLlib's (Tune's ``Trainable``) ``algo.save(checkpoint_dir=)``: :meth:`save_to_path` into that folder.

        Returns:
            The checkpoint's folder (a new temporary one when ``checkpoint_dir`` is None).
        """
        return self.save_to_path(checkpoint_dir)

    def save_checkpoint(self, checkpoint_dir: str) -> None:
        """RLlib's ``save_checkpoint(checkpoint_dir)``: :meth:`save_to_path` into that folder."""
        self.save_to_path(checkpoint_dir)

    def load_checkpoint(self, checkpoint_dir: str) -> None:
        """RLlib's ``load_checkpoint(checkpoint_dir)``: :meth:`restore_from_path`, which calls the callbacks'
        ``on_checkpoint_loaded`` as RLlib's does."""
        self.restore_from_path(checkpoint_dir)

    def foreach_env_runner(self, func: Any, *, local_env_runner: bool = True) -> list[Any]:
        """Call ``func(env_runner)`` on every env runner; the results in runner order (RLlib's
        ``algo.env_runner_group.foreach_env_runner(func)``).

        Args:
            func: A function of one env runner. Remote runners (Ray actors) get a function
                defined at the top level of an imported module (or its ``"module:function"``
                path) by reference, and a lambda or closure as RLlib sends it: with the
                call, over Ray's cloudpickle (issue 39). Its results must be plain data.
            local_env_runner: Also call it on the local runner, first (with remote runners the
                local runner does not sample: it keeps the group's totals).

        Raises:
            ValueError: ``func`` is neither callable nor a ``"module:function"`` path.
        """
        return self.env_runner_group.foreach_env_runner(func, local_env_runner=local_env_runner)

    def cleanup(self) -> None:
        """RLlib's (Tune's) name of :meth:`stop`; calling it again does nothing."""
        self.stop()

    def stop(self) -> None:
        """Release the environments and stop the remote actors, if any (idempotent)."""
        self.env_runner_group.close()
        eval_runners = getattr(self, "eval_runners", None)  # absent when building the env runners failed
        if eval_runners is not None:
            eval_runners.close()
        learner_group = getattr(self, "learner_group", None)  # absent when building it failed in __init__
        if learner_group is not None:
            learner_group.close()

    # ------------------------------------------------------------------ Checkpointable

    def get_checkpointable_components(self) -> list[tuple[str, Checkpointable]]:
        """``env_runner`` (the local runner), ``learner_group``, and ``eval_env_runner`` with evaluation."""
        components: list[tuple[str, Checkpointable]] = [
            ("env_runner", self.env_runner),
            ("learner_group", self.learner_group),
        ]
        if self.eval_runners is not None:
            components.append(("eval_env_runner", self.eval_runners.local_env_runner))
        return components

    def get_delegated_components(self) -> dict[str, DelegatedComponent]:
        """``{"env_runner": the remote runners}`` when there are some: runner 1 writes that folder
        (``eval_env_runner`` likewise, for remote evaluation runners)."""
        delegated: dict[str, DelegatedComponent] = {}
        delegate = self.env_runner_group.delegate
        if delegate is not None:
            delegated["env_runner"] = delegate
        eval_delegate = None if self.eval_runners is None else self.eval_runners.group.delegate
        if eval_delegate is not None:
            delegated["eval_env_runner"] = eval_delegate
        return delegated

    def get_state(self, components: Names = None, *, not_components: Names = None, **kwargs: Any) -> dict[str, Any]:
        """``training_iteration`` plus the states of the selected components."""
        self.env_runner_group.sync_connector_states_to_local()
        if self.eval_runners is not None:
            self.eval_runners.group.sync_connector_states_to_local()
        state = {
            "training_iteration": self.training_iteration,
            "metrics": self.metrics.get_state(),
            **self._get_components_state(components, not_components=not_components),
        }
        if "env_runner" in state:  # remote runners: their RNGs and environments
            state["env_runner"].update(self.env_runner_group.get_runner_states())
        if "eval_env_runner" in state and self.eval_runners is not None:
            state["eval_env_runner"].update(self.eval_runners.group.get_runner_states())
        return state

    state_schema: ClassVar[Schema] = Schema({"training_iteration": count, "metrics": read_metrics_state})
    """What the own state holds (the default ``check_state`` reads it): a count of iterations, and a
    metrics logger's state of its layout (another layout: IncompatibleCheckpointError)."""

    def set_state(self, state: dict[str, Any]) -> None:
        """Apply ``state`` (missing parts are left as they are), then sync the env runners.

        Every part (the components' too) is checked before any is applied (``check_state``).
        """
        check_state_tree(self, state, where="algorithm")
        self._set_components_state(state)
        if "env_runner" in state:
            self.env_runner_group.set_runner_states(state["env_runner"])
        if "eval_env_runner" in state and self.eval_runners is not None:
            self.eval_runners.group.set_runner_states(state["eval_env_runner"])
        if "training_iteration" in state:
            self.training_iteration = count(state["training_iteration"], where="training_iteration")
        if "metrics" in state:
            self.metrics.set_state(state["metrics"], where="metrics")
        self._sync_env_runners()

    def after_restore(self, *, component: str | None) -> None:
        """After every restore, whole or partial: sync the env runners, then ``on_checkpoint_loaded``.

        After a partial restore (``component="learner_group/learner/rl_module/p1"``)
        the env runners act with the restored weights at once. With remote env
        runners or learners, the actors read their folders themselves, in parallel,
        and nothing is applied anywhere until every part was read and verified
        (the engine's delegation, :mod:`cairn.delegation`).
        """
        if component and component.strip("/"):  # a whole restore ran set_state, which synced already
            self._sync_env_runners()
        self.callbacks.on_checkpoint_loaded(algorithm=self)

    def on_from_checkpoint_failed(self) -> None:
        """Stop the actors of an algorithm ``from_checkpoint`` built and drops, or they would outlive it.

        A corrupt file, or a read that raced an overwrite and is retried on a new object.
        """
        self.stop()

    @classmethod
    def from_checkpoint(cls, path: Any, **kwargs: Any) -> Self:
        """:meth:`cairn.Checkpointable.from_checkpoint`, which also takes back what the checkpoint could not record.

        A config given lambdas, closures, bound methods or functions of a script
        (``policy_mapping_fn``, the connector factories, ``callbacks_on_<hook>``) is
        saved without them: the checkpoint records only that each existed (SPEC 8,
        no code). Pass them again by their config field names::

            PPO.from_checkpoint(path, policy_mapping_fn=map_fn, env_to_module_connector=make,
                                callbacks_on_episode_end=[on_end])

        (a hook's functions as a list, in the order the config was given them), or
        pass your own config (``config=config``). An env creator (``environment(creator)``, or
        a ``register_env`` name whose creator the program has not registered again) comes back
        as ``env=creator``; a callable inside ``evaluation_config`` or
        ``algorithm_config_overrides_per_module`` nested as in the config
        (``evaluation_config={"policy_mapping_fn": fn}``). Without them the load raises one
        :class:`~cairn.errors.MissingCallableError` naming each, before anything is built.
        The other keywords are :meth:`cairn.Checkpointable.from_checkpoint`'s.
        """
        given = {name: kwargs.pop(name) for name in list(kwargs) if name in CALLABLE_FIELDS}
        for name in (ENV_ROLE, "evaluation_config", "algorithm_config_overrides_per_module"):
            # env=creator (RLlib's environment(env=creator)); the dict fields' callables nested as in the config
            if callable(kwargs.get(name)) or isinstance(kwargs.get(name), Mapping):
                given[name] = kwargs.pop(name)
        with supplying(given):
            return super().from_checkpoint(path, **kwargs)

    @classmethod
    def recorded_names(cls, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[tuple[str, str, Any]]:
        """The hook of :func:`cairn.registry.check_recorded_names`: what a recorded config names by reference."""
        config = args[0] if args else kwargs.get("config")
        return config.recorded_names() if isinstance(config, AlgorithmConfig) else []

    @classmethod
    def ctor_args_problem(cls, args: tuple[Any, ...], kwargs: dict[str, Any], folder: FolderSizes) -> str | None:
        """The hook of :mod:`cairn._ctor_bounds`: the modules a recorded config builds must fit the checkpoint.

        Building the algorithm builds a module per policy (and copies of it: target
        networks, env runners' inference copies); the hidden-to-hidden weights their
        ``hidden_sizes`` ask for (a lower bound) must fit what the whole checkpoint
        folder holds, or the file is hostile (``hidden_sizes=[6144] * 4`` is 1.3 GB; the same for
        an LSTM's ``lstm_cell_size`` and the heads' ``head_fcnet_hiddens``).
        """
        config = args[0] if args else kwargs.get("config")
        if not isinstance(config, AlgorithmConfig):
            return None  # not a config: the constructor judges it
        return modules_problem(config, folder)

    @classmethod
    def ctor_machine_problem(
        cls, args: tuple[Any, ...], kwargs: dict[str, Any], overridden: frozenset[str]
    ) -> str | None:
        """The hook of :func:`cairn._ctor_bounds.check_machine`: a recorded config's counts fit this machine.

        A config the caller passes (``from_checkpoint(path, config=config)``) is the
        caller's explicit choice and is not bounded.
        """
        config = args[0] if args else kwargs.get("config")
        if "config" in overridden or not isinstance(config, AlgorithmConfig):
            return None
        return machine_problem(config)

    def get_ctor_args_and_kwargs(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """``((config,), {})``, without ``load_state_path`` (the checkpoint holds the weights)."""
        return (replace(self.config, rl_module_spec=without_load_state_paths(self.config.given_rl_module_spec())),), {}

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


register_old_paths(Algorithm, AlgorithmConfig)  # both were cairn.rl.algorithm's in 0.1


def recorded_config(path: str) -> AlgorithmConfig:
    """The config an algorithm checkpoint at ``path`` records, read through the engine's verified reader.

    The classes and functions it names resolve through the allow-list (SPEC 8), as in
    ``from_checkpoint``; nothing is built. For a caller that derives the config it loads
    with (``cairn train --resume`` with settings on its command line).

    Raises:
        CheckpointError: The checkpoint is missing, damaged, names what is not allowed, or
            records no algorithm config.
    """
    from cairn._reader import open_checkpoint
    from cairn.manifest import CTOR
    from cairn.registry import check_recorded_names

    reader = open_checkpoint(path, None)
    args, kwargs = reader.ctor(False)
    config = args[0] if args else kwargs.get("config")
    if not isinstance(config, AlgorithmConfig):
        raise IncompatibleCheckpointError(f"{reader.where(CTOR)} records no algorithm config.")
    check_recorded_names(Algorithm, (config,), {}, trusted=None, where=reader.where(CTOR))
    return config

"""Adding and removing modules while training runs (RLlib's ``Algorithm.add_module`` / ``remove_module``).

:class:`ModuleChanges` is a base of :class:`~cairn.rl.algorithms.algorithm.Algorithm`: the
learners, the training runners and the evaluation runners change together, or none does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from cairn.rl.config.algorithm_config import AlgorithmConfig
from cairn.rl.config.setting_checks import MULTI_AGENT_PREFIX, multi_env_mapping_fn_refusal
from cairn.rl.core.rl_module.multi_rl_module import MultiRLModuleSpec, load_module_state, module_seed
from cairn.rl.core.rl_module.rl_module import RLModuleSpec

if TYPE_CHECKING:
    from cairn.rl.algorithms.evaluation import EvaluationRunners
    from cairn.rl.core.learner.learner_group import LearnerGroup
    from cairn.rl.env.env_runner import EnvRunner
    from cairn.rl.env.env_runner_group import EnvRunnerGroup

__all__ = ["ModuleChanges"]


class ModuleChanges:
    """The algorithm's :meth:`add_module` and :meth:`remove_module` (what they change lives on the algorithm)."""

    config: AlgorithmConfig
    learner_group: LearnerGroup
    env_runner_group: EnvRunnerGroup
    eval_runners: EvaluationRunners | None

    if TYPE_CHECKING:

        @property
        def env_runner(self) -> EnvRunner: ...

        def _sync_env_runners(self) -> None: ...

    def add_module(
        self,
        module_id: str,
        module_spec: RLModuleSpec,
        *,
        config_overrides: Mapping[str, Any] | None = None,
        new_agent_to_module_mapping_fn: Any = None,
        new_should_module_be_updated: Sequence[str] | None = None,
    ) -> MultiRLModuleSpec:
        """Add a module while training runs (RLlib's ``Algorithm.add_module``).

        The learners get the module and an optimizer, every env runner (local and
        remote) an inference copy with the same weights, and the config its new
        ``policies``, ``rl_module_spec`` (a :class:`MultiRLModuleSpec` of the
        current modules), overrides, mapping function and trainable set: a
        checkpoint records them, and ``from_checkpoint`` rebuilds exactly these modules.

        Args:
            module_id: The new module's id (one path segment).
            module_spec: Its spec; fields left ``None`` are filled in as for the
                config's modules (default class, the env's spaces, ``model_config``).
                Its ``load_state_path``, if any, gives its starting weights.
            config_overrides: The module's own settings (``{"lr": 1e-3}``), kept in
                ``algorithm_config_overrides_per_module``.
            new_agent_to_module_mapping_fn: Stored as ``config.policy_mapping_fn``
                (``None`` keeps the current one). Refused on a ``"multi:"`` env, whose
                agents keep the modules of ``config.policy_mapping``.
            new_should_module_be_updated: Stored as ``config.policies_to_train``
                (``None`` keeps the current one).

        Returns:
            The :class:`MultiRLModuleSpec` of all modules now (as RLlib; also ``config.rl_module_spec``).
            The new module itself is ``get_module(module_id)``.

        Raises:
            ValueError: An invalid or existing id, an unknown setting in ``config_overrides``,
                or a mapping function on a ``"multi:"`` env.
        """
        if module_id in self.config.policies:
            raise ValueError(f"Module id {module_id!r} already exists (policies={list(self.config.policies)}).")
        self._check_mapping_fn_allowed(new_agent_to_module_mapping_fn, "add_module")
        runner = self.env_runner
        spec = module_spec.with_defaults(
            module_class=self.config.get_default_rl_module_class(),
            observation_space=runner.observation_space,
            action_space=runner.action_space,
            model_config=self.config.model_config,
            seed=module_seed(self.config, len(self.config.policies)),
        )
        weights = None if spec.load_state_path is None else load_module_state(spec, spec.load_state_path)
        spec = replace(spec, load_state_path=None)
        old_config = self.config
        self.learner_group.add_module(module_id, spec, config_overrides=config_overrides)
        try:
            if weights is not None:
                self.learner_group.set_state({"learner": {"rl_module": {module_id: weights}}})
            self.config = self._config_with_modules(
                policies=(*self.config.policies, module_id),
                policy_mapping_fn=new_agent_to_module_mapping_fn,
                policies_to_train=new_should_module_be_updated,
            )
            self._add_to_runners(module_id, spec, old_config)
        except BaseException:
            # A runner refused it (a spec of no agent's spaces): the learners, the config and every
            # runner are as they were, so that training, add_module and checkpoints go on consistently.
            self.learner_group.remove_module(module_id)
            self.config = old_config
            if self.eval_runners is not None:
                self.eval_runners.update_config(old_config)
            raise
        self._sync_env_runners()
        added: MultiRLModuleSpec = self.config.rl_module_spec
        return added

    def _add_to_runners(self, module_id: str, spec: RLModuleSpec, old_config: AlgorithmConfig) -> None:
        """Add the module to the training runners, then the evaluation runners; if those refuse, the
        training runners drop it again (with ``old_config``), so that a refusal changes no runner."""
        self.env_runner_group.add_module(module_id, spec, config=self.config)
        if self.eval_runners is None:
            return
        try:
            self.eval_runners.add_module(module_id, spec, config=self.config)
        except BaseException:
            self.env_runner_group.remove_module(module_id, config=old_config)
            raise

    def _check_mapping_fn_allowed(self, mapping_fn: Any, what: str) -> None:
        """Refuse a mapping function on a ``"multi:"`` env, before anything changes.

        Its env copies have fixed agent -> module assignments (``config.policy_mapping``),
        and a function given there would never be called: input is refused, never ignored.
        """
        if mapping_fn is not None and self.config.env.startswith(MULTI_AGENT_PREFIX):
            what = f"{what}(new_agent_to_module_mapping_fn=...)"
            raise ValueError(multi_env_mapping_fn_refusal(self.config.env, what))

    def remove_module(
        self,
        module_id: str,
        *,
        new_agent_to_module_mapping_fn: Any = None,
        new_should_module_be_updated: Sequence[str] | None = None,
    ) -> MultiRLModuleSpec:
        """Remove a module while training runs (RLlib's ``Algorithm.remove_module``).

        The learners drop it with its optimizer and overrides, the env runners
        their copies, the config its entry (see :meth:`add_module`). It goes at
        once, as in RLlib: agents of episodes in flight that act with it are
        re-mapped with ``new_agent_to_module_mapping_fn`` from their next action
        on, and their transitions collected with it and not yet trained on are
        dropped (they would train a module that no longer exists; see
        :meth:`~cairn.rl.env.multi_agent_env_runner.MultiAgentEnvRunner.remove_module`).

        Returns:
            The :class:`MultiRLModuleSpec` of the modules left (as RLlib; also ``config.rl_module_spec``).

        Raises:
            KeyError: No such module.
            ValueError: It is the last module, agents still act with it
                (``config.policy_mapping`` names it), the mapping function
                maps an agent of an episode in flight back to it (nothing is
                changed then), or a mapping function is given on a ``"multi:"`` env.
        """
        self._check_mapping_fn_allowed(new_agent_to_module_mapping_fn, "remove_module")
        policies = tuple(p for p in self.config.policies if p != module_id)
        if len(policies) == len(self.config.policies):
            raise KeyError(f"No module {module_id!r}; the modules are {list(self.config.policies)}.")
        if not policies:
            raise ValueError(f"Module {module_id!r} is the algorithm's last module; add another one first.")
        mapped = sorted(agent for agent, m in (self.config.policy_mapping or {}).items() if m == module_id)
        if mapped:
            raise ValueError(
                f"Module {module_id!r} cannot be removed: config.policy_mapping maps agents {mapped} to it. "
                "Map them to another module first."
            )
        trainable = (
            self.config.policies_to_train if new_should_module_be_updated is None else new_should_module_be_updated
        )
        config = self._config_with_modules(
            policies=policies,
            policy_mapping_fn=new_agent_to_module_mapping_fn,
            policies_to_train=None if trainable is None else [p for p in trainable if p != module_id],
            without=module_id,
        )
        # Every runner of both groups checks first; only then does any drop it (a refusal changes nothing).
        self.env_runner_group.prepare_remove_module(module_id, config=config)
        if self.eval_runners is not None:
            try:
                self.eval_runners.prepare_remove_module(module_id, config=config)
            except BaseException:
                self.env_runner_group.discard_remove_module()
                raise
        self.env_runner_group.apply_remove_module(config=config)
        if self.eval_runners is not None:
            self.eval_runners.apply_remove_module(config=config)
        self.learner_group.remove_module(module_id)
        self.config = config
        left: MultiRLModuleSpec = config.rl_module_spec
        return left

    def _config_with_modules(
        self,
        *,
        policies: tuple[str, ...],
        policy_mapping_fn: Any,
        policies_to_train: Sequence[str] | None,
        without: str | None = None,
    ) -> AlgorithmConfig:
        """The config after an add/remove: the modules the learners hold now, as a MultiRLModuleSpec."""
        specs = {m: spec for m, spec in self.learner_group.module_specs.items() if m != without}
        overrides = {m: dict(o) for m, o in self.config.algorithm_config_overrides_per_module.items() if m != without}
        overrides.update(
            {
                m: dict(o)
                for m, o in self.learner_group.config.algorithm_config_overrides_per_module.items()
                if m in specs
            }
        )
        # With one policy and no mapping every agent plays it; with more modules that must be said,
        # so the mapping the env runners use now is recorded explicitly.
        mapping = self.config.policy_mapping
        if mapping is None:
            mapping = dict(self.env_runner.policy_mapping)
        return replace(
            self.config,
            policies=policies,
            policy_mapping=mapping,
            rl_module_spec=MultiRLModuleSpec({m: specs[m] for m in policies}),
            algorithm_config_overrides_per_module=overrides,
            policy_mapping_fn=self.config.policy_mapping_fn if policy_mapping_fn is None else policy_mapping_fn,
            policies_to_train=self.config.policies_to_train if policies_to_train is None else tuple(policies_to_train),
        )

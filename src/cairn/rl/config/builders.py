"""RLlib's builder methods on cairn's config dataclasses (issue 25).

RLlib users build a config by chaining ``PPOConfig().environment(...).env_runners(...)
.training(...)``; cairn's configs are dataclasses. :class:`ConfigBuilders` (a base of
:class:`~cairn.rl.config.algorithm_config.AlgorithmConfig`) gives every config
RLlib's builders. Each sets the dataclass's fields and returns ``self`` (RLlib's
semantics), so the builder form and the keyword form give equal dataclasses and equal
checkpoints: nothing a builder is told lives outside the fields, except
``train_batch_size_per_learner``, which cairn turns into ``rollout_length`` from the
number of env runners, envs and learners whenever one of them changes (in any order).

Every RLlib setting a builder takes is one of:

* a cairn field under RLlib's name or another (``lambda_`` -> ``gae_lambda``);
* a translation (``train_batch_size_per_learner`` -> ``rollout_length``, DQN's
  ``epsilon`` schedule -> ``epsilon_start/_end/_timesteps``, ``fcnet_hiddens`` ->
  ``hidden_sizes``);
* accepted only at the values cairn behaves like (RLlib's default, mostly:
  ``framework("torch")``, ``use_gae=True``), anything else refused;
* refused: what cairn does not implement.

A refusal is a ``ValueError`` that names the setting, says why, and what to do; an
unknown name a ``TypeError`` listing the names the builder takes. Nothing is ignored.
A builder also takes cairn's own field names of its group (``training(lr_anneal_timesteps=...)``).
The rules live in :mod:`cairn.rl.config.builder_rules`.
The full table is docs/rllib_parity.md ("RLlib's config builders").
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping
from typing import Any, ClassVar, Self

from cairn.rl.config.builder_rules import BASE_RULES
from cairn.rl.config.translations import GROUPS, PENDING_BATCH, Accept, Refuse, Rule, builder_of, same_setting

__all__ = ["NOT_PROVIDED", "ConfigBuilders"]


class _NotProvided:
    """RLlib's ``NotProvided``: an argument left out, told apart from an explicit ``None``."""

    def __repr__(self) -> str:
        return "NotProvided"


NOT_PROVIDED: Any = _NotProvided()


class _AlgoClassCall(type):
    """Lets ``AlgorithmConfig(algo_class=PPO)`` build the algorithm's own config (RLlib's generic config)."""

    def __call__(cls, *args: Any, algo_class: type[Any] | None = None, **kwargs: Any) -> Any:
        if algo_class is None:
            return super().__call__(*args, **kwargs)
        target = getattr(algo_class, "config_class", None)
        if not (isinstance(target, type) and issubclass(target, cls)):
            raise ValueError(
                f"{cls.__name__}(algo_class={getattr(algo_class, '__name__', algo_class)!r:.60}): give a cairn "
                f"algorithm class (PPO, DQN, SAC) whose config is a {cls.__name__}."
            )
        return type.__call__(target, *args, **kwargs)


class ConfigBuilders(metaclass=_AlgoClassCall):
    """RLlib's config builders; see the module docstring. A base of ``AlgorithmConfig``.

    ``AlgorithmConfig(algo_class=PPO)`` is RLlib's generic form: it makes a ``PPOConfig()``.
    """

    @property
    def train_batch_size(self) -> int:
        """RLlib's ``config.train_batch_size``, read-only: the rows one iteration trains on (PPO:
        ``rollout_length`` x envs per runner x sampling runners; off-policy algorithms: the minibatch)."""
        return self._train_batch_rows()

    @property
    def rollout_fragment_length(self) -> int:
        """RLlib's ``config.rollout_fragment_length``, read-only: ``rollout_length`` (steps per env copy and
        sample); ``env_runners(rollout_fragment_length=...)`` sets it."""
        config: Any = self
        return int(config.rollout_length)

    def get_rollout_fragment_length(self, worker_index: int = 0) -> int:
        """RLlib's ``get_rollout_fragment_length(worker_index=)``: the steps each env of runner ``worker_index``
        samples per ``sample()``. Every cairn runner samples ``rollout_length`` in each of its envs, so this is
        the same for every index; RLlib's ``"auto"`` gives the first runners one step more than the others
        when the train batch does not split evenly, cairn rounds every runner's share up (an iteration trains
        on up to ``envs - 1`` more steps, see :func:`_resolve_batch`).

        Raises:
            ValueError: ``worker_index`` is not an int >= 0.
        """
        if isinstance(worker_index, bool) or not isinstance(worker_index, int) or worker_index < 0:
            raise ValueError(f"worker_index must be an int >= 0 (0: the local runner), got {worker_index!r:.40}.")
        return self.rollout_fragment_length

    @property
    def grad_clip(self) -> float | None:
        """RLlib's ``config.grad_clip``, read-only: ``max_grad_norm`` (``training(grad_clip=...)`` sets it)."""
        config: Any = self
        value: float | None = config.max_grad_norm
        return value

    @property
    def grad_clip_by(self) -> str:
        """RLlib's ``config.grad_clip_by``, read-only: ``"global_norm"``, the one way cairn clips (the builder
        refuses RLlib's ``"value"`` and ``"norm"``)."""
        return "global_norm"

    def _train_batch_rows(self) -> int:
        config: Any = self
        return int(config.rollout_length) * int(config.num_envs_per_env_runner) * max(1, int(config.num_env_runners))

    RLLIB_RULES: ClassVar[dict[str, dict[str, Rule]]] = {}
    """Per builder, the RLlib settings an algorithm's config adds (``training``: PPO's ``lambda_``, ...)."""

    @classmethod
    def _rules(cls, builder: str) -> dict[str, Rule]:
        rules: dict[str, Rule] = {}
        for klass in reversed(cls.__mro__):
            own = klass.__dict__.get("RLLIB_RULES")
            if isinstance(own, dict) and builder in own:
                rules.update(own[builder])
        merged = dict(BASE_RULES[builder])
        merged.update(rules)
        return merged

    @classmethod
    def _own_fields(cls, builder: str) -> set[str]:
        """The cairn fields ``builder`` takes under their own names."""
        names: set[str] = {f.name for f in dataclasses.fields(cls)} if dataclasses.is_dataclass(cls) else set()
        if builder == "training":
            grouped = {name for group in GROUPS.values() for name in group}
            return names - grouped
        return names & set(GROUPS[builder])

    @classmethod
    def _translate(cls, builder: str, settings: Mapping[str, Any], config: Any) -> dict[str, Any]:
        """The cairn field updates of ``settings`` given to ``builder`` (refusals raise here)."""
        rules = cls._rules(builder)
        own = cls._own_fields(builder)
        updates: dict[str, Any] = {}
        for key, value in settings.items():
            rule = rules.get(key)
            if rule is None and key in own:
                rule = key
            if rule is None:
                raise TypeError(
                    f"{cls.__name__}.{builder}() got an unexpected setting {key!r}. It takes RLlib's "
                    f"{sorted(rules)} and cairn's {sorted(own)}; docs/rllib_parity.md lists where each RLlib "
                    "setting lives."
                )
            if isinstance(rule, str):
                updates[rule] = copy.deepcopy(value) if isinstance(value, dict | list) else value
            elif isinstance(rule, Accept):
                if not any(same_setting(value, v) for v in rule.values):
                    raise ValueError(
                        f"{cls.__name__}.{builder}({key}={value!r:.80}) is refused: {rule.why}. cairn accepts "
                        f"{key} only as {' or '.join(repr(v) for v in rule.values)}."
                    )
            elif isinstance(rule, Refuse):
                raise ValueError(f"{cls.__name__}.{builder}({key}=...) is refused: {rule.why}.")
            else:
                updates.update(rule(config, value))
        return updates

    def _apply(self, builder: str, settings: Mapping[str, Any]) -> Self:
        trial = copy.copy(self)  # refuse before anything changes: translate against a copy
        trial.__dict__ = copy.deepcopy(self.__dict__)
        updates = type(self)._translate(builder, settings, trial)
        for name, value in updates.items():
            setattr(trial, name, value)
        _resolve_batch(trial)
        post_init = getattr(trial, "__post_init__", None)
        if post_init is not None:
            post_init()  # the checks and normalisations a keyword-built config gets
        self.__dict__.clear()
        self.__dict__.update(trial.__dict__)
        return self

    # ------------------------------------------------------------------ RLlib's builders

    def environment(self, env: Any = NOT_PROVIDED, **settings: Any) -> Self:
        """RLlib's ``environment(env, env_config=..., ...)``: the env id or ``MultiAgentEnv`` class, its config.

        As in RLlib, an ``env`` that is given is applied, ``None`` included (which the config
        then refuses, by name); only an ``env`` left out keeps the current one.
        """
        if env is not NOT_PROVIDED:
            settings = {"env": env, **settings}
        return self._apply("environment", settings)

    def env_runners(self, **settings: Any) -> Self:
        """RLlib's ``env_runners(num_env_runners=, num_envs_per_env_runner=, rollout_fragment_length=, ...)``."""
        return self._apply("env_runners", settings)

    def learners(self, **settings: Any) -> Self:
        """RLlib's ``learners(num_learners=, ...)``."""
        return self._apply("learners", settings)

    def training(self, **settings: Any) -> Self:
        """RLlib's ``training(lr=, train_batch_size_per_learner=, minibatch_size=, num_epochs=, gamma=, ...)``
        with the algorithm's own keys (PPO's ``clip_param``, DQN's ``replay_buffer_config``, ...)."""
        return self._apply("training", settings)

    def multi_agent(self, **settings: Any) -> Self:
        """RLlib's ``multi_agent(policies=, policy_mapping_fn=, policies_to_train=,
        algorithm_config_overrides_per_module=)``."""
        return self._apply("multi_agent", settings)

    def rl_module(self, **settings: Any) -> Self:
        """RLlib's ``rl_module(rl_module_spec=, model_config=)``."""
        return self._apply("rl_module", settings)

    def callbacks(self, callbacks_class: Any = NOT_PROVIDED, **settings: Any) -> Self:
        """RLlib's ``callbacks(callbacks_class, on_algorithm_init=, on_episode_end=, ...)``.

        ``callbacks_class``: an ``RLlibCallback`` subclass, a ``functools.partial`` of one
        with plain-data arguments, or a list of them. ``on_<hook>=``: a function (or a
        list) defined at the top level of an imported module, recorded as
        ``"module:function"`` in ``callbacks_on_<hook>`` and called after the classes'
        hooks, as RLlib does (cairn.rl.config.callback_forms). As in RLlib, ``callbacks(None)``
        resets to the default callbacks; only a ``callbacks_class`` left out keeps the
        current one.
        """
        if callbacks_class is not NOT_PROVIDED:
            settings = {"callbacks_class": callbacks_class, **settings}
        return self._apply("callbacks", settings)

    def reporting(self, **settings: Any) -> Self:
        """RLlib's ``reporting(metrics_num_episodes_for_smoothing=, ...)``."""
        return self._apply("reporting", settings)

    def debugging(self, **settings: Any) -> Self:
        """RLlib's ``debugging(seed=, ...)``."""
        return self._apply("debugging", settings)

    def resources(self, **settings: Any) -> Self:
        """RLlib's ``resources(...)``: CPU only (``num_gpus=0``); cairn's ``num_torch_threads``."""
        return self._apply("resources", settings)

    def framework(self, framework: Any = "torch", **settings: Any) -> Self:
        """RLlib's ``framework("torch")``; other frameworks are refused."""
        return self._apply("framework", {"framework": framework, **settings})

    def api_stack(self, **settings: Any) -> Self:
        """RLlib's ``api_stack(...)``: the new API stack only."""
        return self._apply("api_stack", settings)

    def fault_tolerance(self, **settings: Any) -> Self:
        """RLlib's ``fault_tolerance(restart_failed_env_runners=, ignore_env_runner_failures=,
        max_num_env_runner_restarts=, env_runner_restore_timeout_s=)``; cairn's ``checkpoint_timeout_s``."""
        return self._apply("fault_tolerance", settings)

    def evaluation(self, **settings: Any) -> Self:
        """RLlib's ``evaluation(evaluation_interval=, evaluation_duration=, evaluation_duration_unit=,
        evaluation_num_env_runners=, evaluation_config=)``: evaluation runners that ``train()`` runs every
        ``evaluation_interval`` iterations and ``Algorithm.evaluate()`` on demand."""
        return self._apply("evaluation", settings)

    # ------------------------------------------------------------------ RLlib's helpers

    def copy(self, copy_frozen: bool | None = None) -> Self:
        """A deep copy (RLlib's ``copy``): frozen as this one is, or as ``copy_frozen`` says."""
        copied = copy.deepcopy(self)
        if copy_frozen is not None:
            object.__setattr__(copied, "_is_frozen", bool(copy_frozen))
        return copied

    def freeze(self) -> None:
        """RLlib's ``freeze()``: setting any attribute of this config raises ``AttributeError`` from now on
        (builders too; :meth:`copy` with ``copy_frozen=False`` gives a config to change)."""
        object.__setattr__(self, "_is_frozen", True)

    @property
    def is_frozen(self) -> bool:
        """Whether :meth:`freeze` was called (RLlib's ``is_frozen``)."""
        return bool(self.__dict__.get("_is_frozen", False))

    def __setattr__(self, name: str, value: Any) -> None:
        if self.__dict__.get("_is_frozen", False):
            shown = "settings" if name == "__dict__" else name  # a builder replaces the settings at once
            raise AttributeError(
                f"Cannot set attribute ({shown}) of an already frozen {type(self).__name__}! Change a "
                "config.copy(copy_frozen=False) instead."
            )
        super().__setattr__(name, value)

    def to_dict(self) -> dict[str, Any]:
        """The settings as a dict of cairn's field names (``from_dict`` takes it back)."""
        assert dataclasses.is_dataclass(self)
        # As held (rl_module_spec: None for the default module, though the attribute reads the default spec).
        held = self.__dict__
        return {
            f.name: copy.deepcopy(held[f.name] if f.name in held else getattr(self, f.name))
            for f in dataclasses.fields(self)
            if f.init
        }

    def update_from_dict(self, config_dict: Mapping[str, Any]) -> Self:
        """Apply a dict of cairn field names and RLlib setting names (each routed to its builder)."""
        fields: set[str] = {f.name for f in dataclasses.fields(self)} if dataclasses.is_dataclass(self) else set()
        per_builder: dict[str, dict[str, Any]] = {}
        for key, value in config_dict.items():
            builder = builder_of(type(self), key, fields)
            per_builder.setdefault(builder, {})[key] = value
        for builder, settings in per_builder.items():
            self._apply(builder, settings)
        return self

    @classmethod
    def from_dict(cls, config_dict: Mapping[str, Any]) -> Self:
        """A config from :meth:`to_dict`'s dict, or from RLlib's setting names."""
        return cls().update_from_dict(config_dict)

    @classmethod
    def overrides(cls, **settings: Any) -> dict[str, Any]:
        """RLlib's ``AlgorithmConfig.overrides(...)``: the settings in cairn's names, checked, for
        ``algorithm_config_overrides_per_module`` (``PPOConfig.overrides(lambda_=0.9)`` -> ``{"gae_lambda": 0.9}``).

        Raises:
            TypeError: A setting no builder of this config takes.
            ValueError: A refused setting, or one that cannot differ per module (batch sizes).
        """
        default = cls()
        fields: set[str] = {f.name for f in dataclasses.fields(default)} if dataclasses.is_dataclass(default) else set()
        out: dict[str, Any] = {}
        for key, value in settings.items():
            if key in ("train_batch_size_per_learner", "train_batch_size", "rollout_fragment_length"):
                raise ValueError(
                    f"{cls.__name__}.overrides({key}=...) is refused: every module trains on the same sampled "
                    "batch in cairn; override per module what the learner reads (lr, num_epochs, minibatch_size, ...)."
                )
            builder = builder_of(cls, key, fields)
            out.update(cls._translate(builder, {key: value}, default))
        return out

    def build_algo(self, env: Any = None) -> Any:
        """The algorithm of this config (RLlib's ``build_algo``), e.g. ``PPO(self)``."""
        if env is not None:
            self.environment(env)
        return self.algo_class()(self)

    def build(self, env: Any = None) -> Any:
        """RLlib's older name of :meth:`build_algo`."""
        return self.build_algo(env)

    @classmethod
    def algo_class(cls) -> type[Any]:
        """The algorithm this config builds; each algorithm's config names it."""
        raise NotImplementedError(f"{cls.__name__} belongs to no algorithm: use PPOConfig, DQNConfig or SACConfig.")


def _resolve_batch(config: Any) -> None:
    """``rollout_length`` from the pending train batch size (see :data:`PENDING_BATCH`).

    PPO samples ``rollout_length`` steps in each of ``num_envs_per_env_runner`` envs of
    each sampling runner (``max(1, num_env_runners)``) per iteration, and splits that
    batch over ``max(1, num_learners)`` learners. A batch that is no multiple of the envs
    is taken as RLlib takes it (its ``rollout_fragment_length="auto"``): each env samples
    the batch's share rounded up, so an iteration trains on up to ``envs - 1`` more steps.
    """
    pending = config.__dict__.get(PENDING_BATCH)
    if pending is None:
        return
    kind, size = pending
    total = size * max(1, int(config.num_learners)) if kind == "per_learner" else size
    envs = max(1, int(config.num_env_runners)) * int(config.num_envs_per_env_runner)
    config.rollout_length = max(1, -(-total // envs))  # ceil: at least the batch asked for

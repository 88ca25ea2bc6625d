"""Which learner and RLModule spec an algorithm's config names (RLlib's ``get_default_*`` methods).

:class:`ModuleSpecs` (a base of :class:`~cairn.rl.config.algorithm_config.AlgorithmConfig`)
holds RLlib's ``learner_class``, ``get_default_learner_class``,
``get_default_rl_module_class`` and ``get_default_rl_module_spec``; an algorithm's config
overrides the ``get_default_*`` ones, and ``get_multi_rl_module_spec``, which compiles
the spec of every module from those (RLlib's rules). :class:`GivenOrDefaultSpec` is the
``rl_module_spec`` field: it records what the user gave (``None`` for the default module)
and reads as RLlib's property. Like the rest of ``rl/config``, this module imports nothing
of ``cairn.rl`` above it: the spec classes are found by name, never imported.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from cairn.registry import resolve_class

__all__ = ["DEFAULT_MODULE_ID", "GivenOrDefaultSpec", "ModuleSpecs", "default_spec_of"]


DEFAULT_MODULE_ID = "default_policy"
"""The module id of a single-policy algorithm (RLlib's ``DEFAULT_MODULE_ID``; ``algorithm_config`` exports it too)."""


def default_spec_of(config: Any) -> Any:
    """``config.get_default_rl_module_spec()``, or ``None`` for a config of no algorithm."""
    try:
        return config.get_default_rl_module_spec()
    except NotImplementedError:
        # The base AlgorithmConfig names no default module; RLlib's property fails there, but
        # repr and == read every field, so it reads as "none given".
        return None


class GivenOrDefaultSpec:
    """The ``rl_module_spec`` field: records the spec the user gave, reads as RLlib's property.

    The config records (checkpoints, ``to_dict``) what was given: ``None`` for the
    algorithm's default module (:meth:`AlgorithmConfig.given_rl_module_spec`). Reading
    ``config.rl_module_spec`` gives, as RLlib's property does, the algorithm's default spec
    (:meth:`AlgorithmConfig.get_default_rl_module_spec`) when none was given.
    """

    def __set_name__(self, owner: type, name: str) -> None:
        self._name = name

    def __get__(self, config: Any, owner: type | None = None) -> Any:
        if config is None:
            return None  # the field's default (dataclasses read it from the class): no spec given
        given = config.__dict__.get(self._name)
        return given if given is not None else default_spec_of(config)

    def __set__(self, config: Any, value: Any) -> None:
        config.__dict__[self._name] = value


class ModuleSpecs:
    """RLlib's ``learner_class`` and ``get_default_*`` methods; a base of ``AlgorithmConfig``.

    An algorithm's config overrides :meth:`get_default_learner_class` and
    :meth:`get_default_rl_module_class`; this base belongs to no algorithm.
    """

    @property
    def learner_class(self) -> type[Any]:
        """RLlib's ``config.learner_class``: :meth:`get_default_learner_class` (no ``training(learner_class=)``)."""
        return self.get_default_learner_class()

    def get_default_learner_class(self) -> type[Any]:
        """The :class:`~cairn.rl.core.learner.learner.Learner` subclass that holds this algorithm's loss.

        Each algorithm's config names its learner (PPOConfig: ``PPOLearner``);
        this base config belongs to no algorithm.
        """
        raise NotImplementedError(
            f"{type(self).__name__} names no learner: an algorithm's config overrides get_default_learner_class "
            "(PPOConfig returns PPOLearner)."
        )

    def get_default_rl_module_class(self) -> type[Any]:
        """The ``RLModule`` subclass a spec without ``module_class`` builds (PPOConfig: ``DefaultPPORLModule``)."""
        raise NotImplementedError(
            f"{type(self).__name__} names no default module: an algorithm's config overrides "
            "get_default_rl_module_class (PPOConfig returns DefaultPPORLModule), or give every module's "
            "class in rl_module_spec."
        )

    def get_default_rl_module_spec(self) -> Any:
        """The spec of this algorithm's default module (RLlib's ``get_default_rl_module_spec``).

        An :class:`~cairn.rl.core.rl_module.rl_module.RLModuleSpec` with
        :meth:`get_default_rl_module_class`; spaces and ``model_config`` are left
        ``None`` (an algorithm fills them from its env and :attr:`model_config`).
        Typed ``Any`` because this module imports nothing else of ``cairn.rl``.
        """
        module_class = self.get_default_rl_module_class()
        # Found, never imported: the default module's class imported RLModuleSpec's module (this one
        # imports nothing else of cairn.rl, so that every other part can import it without a cycle).
        spec_class = resolve_class(
            "cairn.rl.core.rl_module.rl_module:RLModuleSpec", where=f"{type(self).__name__}.get_default_rl_module_spec"
        )
        return spec_class(module_class=module_class)

    def given_rl_module_spec(self) -> Any:
        """The ``rl_module_spec`` given to this config, as it is recorded: ``None`` for the default module.

        ``config.rl_module_spec`` reads as RLlib's property (the default spec when none was given).
        """
        return self.__dict__.get("rl_module_spec")

    def get_multi_rl_module_spec(
        self,
        *,
        spaces: Mapping[str, tuple[Any, Any]] | None = None,
        inference_only: bool = False,
        policy_dict: Mapping[str, Any] | None = None,
        single_agent_rl_module_spec: Any = None,
    ) -> Any:
        """The :class:`~cairn.rl.core.rl_module.multi_rl_module.MultiRLModuleSpec` of every module (RLlib's method).

        RLlib's rules: the module ids are ``policy_dict``'s (its ``PolicySpec`` spaces fill the
        specs' spaces), else ``spaces``' (module id -> ``(observation_space, action_space)``),
        else :attr:`policies` (spaces left ``None``: RLlib would make the env to read them; an
        algorithm fills them in when it is built). Each module's spec is, in this order, the
        given ``rl_module_spec``'s entry for it, ``single_agent_rl_module_spec``, or the given
        (or else default) single spec; what it leaves ``None`` comes from
        :meth:`get_default_rl_module_spec` (class) and :attr:`model_config` (merged under the
        spec's own ``model_config``). ``inference_only`` marks the specs built from a single spec.

        Raises:
            ValueError: The default spec is a MultiRLModuleSpec and neither ``rl_module_spec``
                nor ``single_agent_rl_module_spec`` gives a module's spec, or no module class
                can be found for a module.
        """
        config: Any = self  # a dataclass: AlgorithmConfig
        where = f"{type(self).__name__}.get_multi_rl_module_spec"
        spec_class: Any = resolve_class("cairn.rl.core.rl_module.rl_module:RLModuleSpec", where=where)
        multi_spec_class = resolve_class("cairn.rl.core.rl_module.multi_rl_module:MultiRLModuleSpec", where=where)
        if policy_dict is not None:
            module_spaces = {
                str(m): (getattr(p, "observation_space", None), getattr(p, "action_space", None))
                for m, p in policy_dict.items()
            }
        else:
            module_spaces = dict(spaces) if spaces is not None else {m: (None, None) for m in config.policies}
        default = self.get_default_rl_module_spec()
        given = self.given_rl_module_spec()
        current = given if given is not None else default
        single = single_agent_rl_module_spec
        multi_class = resolve_class("cairn.rl.core.rl_module.multi_rl_module:MultiRLModule", where=where)
        extra: dict[str, Any] = {}
        if isinstance(current, spec_class):
            one = replace(single or current, inference_only=inference_only)
            specs = {m: copy.deepcopy(one) for m in module_spaces}
        else:
            own = current.per_module(module_spaces).rl_module_specs  # cairn's shared form: one spec per module
            extra = {
                "multi_rl_module_class": current.multi_rl_module_class or multi_class,
                "load_state_path": current.load_state_path,
                "modules_to_load": current.modules_to_load,
                "model_config": current.model_config,
            }
            if isinstance(default, spec_class):
                one = replace(single or default, inference_only=inference_only)
                specs = {m: copy.deepcopy(own.get(m, one)) for m in {**module_spaces, **own}}
            elif single is None:
                raise ValueError(
                    f"{where}: the default spec is a MultiRLModuleSpec ({current!r:.200}) with no RLModuleSpec to "
                    "compile the modules' specs from; pass single_agent_rl_module_spec=RLModuleSpec(...)."
                )
            else:
                specs = {m: copy.deepcopy(replace(single, inference_only=inference_only)) for m in module_spaces}
        multi = multi_spec_class(rl_module_specs=specs, **({"multi_rl_module_class": multi_class} | extra))
        for module_id, spec in specs.items():
            self._fill_module_spec(module_id, spec, default, module_spaces, spec_class)
        return multi

    def _fill_module_spec(
        self, module_id: str, spec: Any, default: Any, module_spaces: Mapping[str, tuple[Any, Any]], spec_class: Any
    ) -> None:
        """Fill ``spec``'s unset class, spaces and ``model_config`` as RLlib's ``get_multi_rl_module_spec`` does."""
        config: Any = self
        if spec.module_class is None:
            default_specs = {} if isinstance(default, spec_class) else default.per_module([module_id]).rl_module_specs
            if isinstance(default, spec_class):
                spec.module_class = default.module_class
            elif module_id in default_specs:
                spec.module_class = default_specs[module_id].module_class
            else:
                raise ValueError(
                    f"Module class for module {module_id!r} cannot be inferred: neither the rl_module_spec given nor "
                    f"{type(self).__name__}'s default spec names one. Give it in rl_module(rl_module_spec=...)."
                )
        obs_space, act_space = module_spaces.get(module_id, module_spaces.get(DEFAULT_MODULE_ID, (None, None)))
        if spec.observation_space is None:
            spec.observation_space = obs_space
        if spec.action_space is None:
            spec.action_space = act_space
        spec.model_config = dict(config.model_config) | dict(spec.model_config or {})

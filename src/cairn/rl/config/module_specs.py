"""Which learner and RLModule spec an algorithm's config names (RLlib's ``get_default_*`` methods).

:class:`ModuleSpecs` (a base of :class:`~cairn.rl.config.algorithm_config.AlgorithmConfig`)
holds RLlib's ``learner_class``, ``get_default_learner_class``,
``get_default_rl_module_class`` and ``get_default_rl_module_spec``; an algorithm's config
overrides the ``get_default_*`` ones. :class:`GivenOrDefaultSpec` is the
``rl_module_spec`` field: it records what the user gave (``None`` for the default module)
and reads as RLlib's property. Like the rest of ``rl/config``, this module imports nothing
of ``cairn.rl`` above it: the spec class is found by name, never imported.
"""

from __future__ import annotations

from typing import Any

from cairn.registry import resolve_class

__all__ = ["GivenOrDefaultSpec", "ModuleSpecs", "default_spec_of"]


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

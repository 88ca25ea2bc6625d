"""One :class:`~cairn.rl.core.learner.learner.Learner` from a config and an env (RLlib's ``config.build_learner``).

An algorithm builds its learners through its learner group; this is the single
learner RLlib's ``AlgorithmConfig.build_learner(env=...)`` gives, for tests and
scripts that drive a learner by hand.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from cairn.rl.core import DEFAULT_MODULE_ID
from cairn.rl.core.rl_module.multi_rl_module import MultiRLModuleSpec
from cairn.rl.core.rl_module.rl_module import RLModuleSpec

if TYPE_CHECKING:
    from cairn.rl.config.algorithm_config import AlgorithmConfig
    from cairn.rl.core.learner.learner import Learner

__all__ = ["build_learner"]


def build_learner(config: AlgorithmConfig, *, env: Any = None, spaces: Any = None) -> Learner:
    """A learner of ``config.get_default_learner_class()`` over the config's default module spec(s).

    Args:
        config: The config; its ``get_default_rl_module_spec()`` is one spec (module
            id ``default_policy``) or a ``MultiRLModuleSpec`` (its modules).
        env: A gymnasium env whose spaces the modules get where their spec has none.
        spaces: Instead of ``env``: ``(observation_space, action_space)``.

    Raises:
        ValueError: A spec without spaces and neither ``env`` nor ``spaces`` given,
            or both given.
    """
    if env is not None and spaces is not None:
        raise ValueError("build_learner: give env= or spaces=, not both.")
    obs_space, action_space = (env.observation_space, env.action_space) if env is not None else (spaces or (None, None))
    spec = config.get_default_rl_module_spec()
    if isinstance(spec, MultiRLModuleSpec):
        given = spec.rl_module_specs
        # RLlib's shared form: one spec for every module (here the one default module).
        specs: dict[str, RLModuleSpec] = dict(given) if isinstance(given, dict) else {DEFAULT_MODULE_ID: given}
    else:
        specs = {DEFAULT_MODULE_ID: spec}
    filled: dict[str, RLModuleSpec] = {}
    for module_id, module_spec in specs.items():
        filled[module_id] = replace(
            module_spec,
            observation_space=module_spec.observation_space or obs_space,
            action_space=module_spec.action_space or action_space,
        )
        if filled[module_id].observation_space is None or filled[module_id].action_space is None:
            raise ValueError(
                f"build_learner: module {module_id!r} has no spaces; give env= (or spaces=(obs, action)) "
                "or set them in the config's rl_module spec."
            )
    learner: Learner = config.get_default_learner_class()(config, filled)
    return learner

"""One learner, or a learner group, from a config and an env (RLlib's ``config.build_learner``/``build_learner_group``).

An algorithm builds its learners itself; these are what RLlib's
``AlgorithmConfig.build_learner(env=...)`` and ``build_learner_group(env=...)`` give, for
tests and scripts that drive learners by hand. The modules' specs are filled as an
algorithm fills them (:func:`~cairn.rl.core.rl_module.multi_rl_module.module_specs_from_config`:
the config's ``rl_module_spec`` or default spec, the env's spaces, ``model_config``, a seed
per module).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from cairn.rl.core.learner.learner_group import LearnerGroup
from cairn.rl.core.rl_module.multi_rl_module import module_specs_from_config
from cairn.rl.core.rl_module.rl_module import RLModuleSpec

if TYPE_CHECKING:
    from cairn.rl.config.algorithm_config import AlgorithmConfig
    from cairn.rl.core.learner.learner import Learner

__all__ = ["build_learner", "build_learner_group", "module_specs_for"]


def module_specs_for(config: AlgorithmConfig, *, env: Any = None, spaces: Any = None) -> dict[str, RLModuleSpec]:
    """Module id -> complete spec of every policy of ``config``, with ``env``'s (or ``spaces``') spaces.

    Args:
        config: The config.
        env: A gymnasium env whose spaces the modules get where their spec has none.
        spaces: Instead of ``env``: ``(observation_space, action_space)``.

    Raises:
        ValueError: Both ``env`` and ``spaces``, or a module left without spaces.
    """
    if env is not None and spaces is not None:
        raise ValueError("build_learner: give env= or spaces=, not both.")
    obs_space, action_space = (env.observation_space, env.action_space) if env is not None else (spaces or (None, None))
    # None spaces stay None where a spec has none (with_defaults keeps what is set): refused below.
    specs = module_specs_from_config(config, cast(Any, obs_space), cast(Any, action_space))
    for module_id, spec in specs.items():
        if spec.observation_space is None or spec.action_space is None:
            raise ValueError(
                f"build_learner: module {module_id!r} has no spaces; give env= (or spaces=(obs, action)) "
                "or set them in the config's rl_module spec."
            )
    return specs


def build_learner(config: AlgorithmConfig, *, env: Any = None, spaces: Any = None) -> Learner:
    """A learner of ``config.get_default_learner_class()`` over :func:`module_specs_for` (RLlib's ``build_learner``).

    Raises:
        ValueError: What :func:`module_specs_for` refuses.
    """
    learner: Learner = config.get_default_learner_class()(config, module_specs_for(config, env=env, spaces=spaces))
    return learner


def build_learner_group(config: AlgorithmConfig, *, env: Any = None, spaces: Any = None) -> LearnerGroup:
    """A :class:`LearnerGroup` over :func:`module_specs_for` (RLlib's ``build_learner_group``): local, or
    ``num_learners`` Ray learners when the config asks for them.

    Raises:
        ValueError: What :func:`module_specs_for` refuses.
    """
    return LearnerGroup(config, module_specs_for(config, env=env, spaces=spaces))

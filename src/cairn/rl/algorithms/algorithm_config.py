"""AlgorithmConfig: the settings every algorithm shares (environment, sampling, modules, scale).

This module imports nothing else of ``cairn.rl`` (only, when a setting asks
for Ray, the leaf ``cairn.rl.distributed._ray`` to see whether Ray is
installed), so that every other part (env runners, learners, algorithms) can
import it without a cycle. The checks
of environment ids and ``env_config`` live here because a config runs them
when it is built, also when a checkpoint rebuilds it (SPEC 8).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from cairn.errors import CheckpointError
from cairn.registry import loaded_module, register_type

__all__ = ["DEFAULT_MODULE_ID", "MULTI_AGENT_PREFIX", "AlgorithmConfig", "check_env_config", "check_env_id"]

DEFAULT_MODULE_ID = "default_policy"
"""The module id of a single-policy algorithm (RLlib's ``DEFAULT_MODULE_ID``)."""

MULTI_AGENT_PREFIX = "multi:"
"""Prefix of an env id that asks for independent copies, one per agent."""


def check_env_id(env: Any) -> None:
    """Raise ``ValueError`` unless making ``env`` imports nothing that the id itself names.

    gymnasium reads ``"some.module:Env-v0"`` as "import ``some.module``, then
    make ``Env-v0``", so an id recorded in a checkpoint's config could make
    cairn import any installed module (``"this:CartPole-v1"``). An id with a
    module prefix is accepted only when that module is already imported (the
    one module resolver, :func:`cairn.registry.loaded_module`, decides). Configs
    check their id when they are built (also when a checkpoint rebuilds them)
    and when an algorithm starts; ``cairn evaluate`` checks the id it reads
    from a checkpoint.
    """
    if not isinstance(env, str) or not env:
        raise ValueError(f"env must be a gymnasium environment id (a non-empty str), got {env!r}.")
    env_id = env[len(MULTI_AGENT_PREFIX) :] if env.startswith(MULTI_AGENT_PREFIX) else env
    module, sep, name = env_id.partition(":")
    if not sep:
        return
    if not name or ":" in name:
        raise ValueError(f"env={env!r} is not a gymnasium id: expected 'Env-v0' or 'module:Env-v0'.")
    try:
        loaded_module(module, where=f"env={env!r}", what=f"gymnasium environment {name!r}")
    except CheckpointError as err:
        raise ValueError(
            f"{err} An environment id may name only a module the program has already imported, because "
            "gymnasium imports the module an id names."
        ) from err


# Render modes that draw into arrays or text. "human" (and anything unknown) makes gymnasium import a
# window toolkit (pygame, a MuJoCo viewer) and open a window: an import a recorded config would trigger.
_HEADLESS_RENDER_MODES = (None, "rgb_array", "rgb_array_list", "ansi", "ansi_list", "depth_array", "depth_array_list")


def check_env_config(env_config: Any) -> None:
    """Raise ``ValueError`` unless ``env_config`` is a dict whose ``render_mode`` is a headless one.

    ``env_config`` goes to ``gymnasium.make`` as keyword arguments, and may come
    from a checkpoint's recorded config: ``render_mode="human"`` there would
    make building the algorithm import pygame and open a window (SPEC 8: a
    checkpoint never triggers an import, not even indirectly). Checked with
    the env id, by the same callers as :func:`check_env_id`.
    """
    if not isinstance(env_config, Mapping):
        raise ValueError(f"env_config must be a dict of gymnasium.make keyword arguments, got {env_config!r:.80}.")
    mode = env_config.get("render_mode")
    if mode not in _HEADLESS_RENDER_MODES:
        raise ValueError(
            f"env_config render_mode={mode!r:.80} is refused: gymnasium imports a window toolkit for it, and a config "
            f"may come from a checkpoint. Use one of {[m for m in _HEADLESS_RENDER_MODES if m]} (or none), and make "
            "an environment to watch yourself (gymnasium.make(env_id, render_mode='human'))."
        )


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
    """Overrides of ``cairn.rl.core.rl_module.rl_module.DEFAULT_MODEL_CONFIG`` (hidden_sizes,
    activation, log_std_init), the same for every module."""

    lr: float = 2.5e-4
    """The optimizer's learning rate at the start."""

    lr_anneal_timesteps: int | None = 500_000
    """The learning rate falls linearly to 0 over this many timesteps trained per
    module (env steps for single-agent envs); ``None`` keeps it constant."""

    num_epochs: int = 4
    """Passes over each iteration's batch."""

    minibatch_size: int = 128
    """Samples per gradient step (CleanRL: 4 minibatches of a 4 x 128 batch)."""

    max_grad_norm: float | None = 0.5
    """Gradients are clipped to this global norm; ``None`` turns clipping off."""

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

    callbacks_class: type[Any] | list[type[Any]] | None = None
    """A subclass of :class:`cairn.rl.callbacks.callbacks.RLlibCallback`, or a list of them
    (called in order), or ``None``. Recorded in checkpoints by reference: loading one
    needs the class's module imported first."""

    def __post_init__(self) -> None:
        # A config rebuilt from a checkpoint is checked here, before anything makes its
        # environment: gymnasium would import the module an id like "this:CartPole-v1" names,
        # or pygame for render_mode="human" in env_config.
        check_env_id(self.env)
        check_env_config(self.env_config)

    def get_default_learner_class(self) -> type[Any]:
        """The :class:`~cairn.rl.core.learner.learner.Learner` subclass that holds this algorithm's loss.

        Each algorithm's config names its learner (PPOConfig: ``PPOLearner``);
        this base config belongs to no algorithm.
        """
        raise NotImplementedError(
            f"{type(self).__name__} names no learner: an algorithm's config overrides get_default_learner_class "
            "(PPOConfig returns PPOLearner)."
        )

    def validate(self) -> None:
        """Raise ``ValueError`` when a setting is out of range, the env id names a module the
        program has not imported, or a setting asks for Ray and Ray is not installed."""
        check_env_id(self.env)
        check_env_config(self.env_config)
        for name in ("num_envs_per_env_runner", "rollout_length", "episode_return_window"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}.")
        if self.minibatch_size < 1 or self.num_epochs < 1:
            raise ValueError("minibatch_size and num_epochs must be at least 1.")
        if self.lr <= 0.0:
            raise ValueError(f"lr must be positive, got {self.lr}.")
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

"""RLlib's episode-returning ``sample()``: what ``SingleAgentEnvRunner`` and ``MultiAgentEnvRunner`` share.

RLlib's env runners return episodes: ``sample(num_timesteps=, num_episodes=,
random_actions=, force_reset=)``. cairn's algorithms sample fixed-length batches
(``EnvRunner.sample_batches()``); this module gives RLlib's call on its own env copies, so a
user (or RLlib's tests) can drive an env runner the RLlib way. Its episodes in flight
live only in memory (they are not part of a runner's checkpoint); modules act on what
the runners' env-to-module pipelines give, and stateful modules are the batch
sampler's (docs/rllib_parity.md).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
import numpy.typing as npt
import torch

from cairn.rl.config.algorithm_config import AlgorithmConfig
from cairn.rl.core.rl_module.multi_rl_module import MultiRLModule
from cairn.rl.env.episodes import SingleAgentEpisode
from cairn.rl.env.module_spaces import build_module_specs

__all__ = ["RunnerEpisode", "SampleRequestError", "act", "build_module_or_none", "sample_plan"]


class SampleRequestError(ValueError, AssertionError):
    """A ``sample()`` call asked for both ``num_timesteps`` and ``num_episodes``, or for a negative count.

    A ``ValueError`` (cairn's kind for a bad argument) and an ``AssertionError``: RLlib's runners
    ``assert`` these, so code written for RLlib (and RLlib's own tests) catches ``AssertionError``."""


class RunnerEpisode(SingleAgentEpisode):
    """One agent's episode as ``sample()`` returns it: a chunk starting at ``t_started``, with the
    module's other outputs per step (``extra_model_outputs``: ``action_logp``, ``action_dist_inputs``, ...)."""

    def __init__(
        self,
        id_: str,
        *,
        observation: Any,
        info: Mapping[str, Any],
        t_started: int = 0,
        env_index: int = 0,
        agent_id: str | int | None = "default_agent",
        module_id: str = "default_policy",
    ) -> None:
        super().__init__(id_, env_index=env_index, agent_id=agent_id, module_id=module_id)
        self._observations = [observation]
        self._infos = [dict(info)]
        self.t_started = int(t_started)

    def record(
        self,
        observation: Any,
        action: Any,
        reward: float,
        info: Mapping[str, Any],
        *,
        terminated: bool,
        truncated: bool,
        outputs: Mapping[str, Any],
    ) -> None:
        """Record one step: the observation after it, the action, reward, info, end flags and module outputs."""
        self.add_step(observation, action, reward, info)
        for key, value in outputs.items():
            self._extra.setdefault(key, []).append(value)
        self.is_terminated, self.is_truncated = bool(terminated), bool(truncated)

    def successor(self, id_: str) -> RunnerEpisode:
        """The chunk that continues this (unfinished) episode in the next ``sample()`` call."""
        return RunnerEpisode(
            id_,
            observation=self.get_observations(-1),
            info=self.get_infos(-1),
            t_started=self.t,
            env_index=self.env_index,
            agent_id=self.agent_id,
            module_id=str(self.module_id),
        )


def sample_plan(
    config: AlgorithmConfig, num_envs: int, num_timesteps: int | None, num_episodes: int | None
) -> tuple[int | None, int | None]:
    """``(num_timesteps, num_episodes)`` of a ``sample()`` call, RLlib's way.

    Neither given: ``rollout_length`` steps per env copy (``batch_mode="truncate_episodes"``)
    or one episode per env copy (``"complete_episodes"``).

    Raises:
        SampleRequestError: Both given, or a negative count.
    """
    if num_timesteps is not None and num_episodes is not None:
        raise SampleRequestError(
            f"sample(num_timesteps={num_timesteps}, num_episodes={num_episodes}): give one of them (or neither, "
            "for rollout_fragment_length steps per env copy)."
        )
    for name, value in (("num_timesteps", num_timesteps), ("num_episodes", num_episodes)):
        if value is not None and int(value) < 0:
            raise SampleRequestError(f"sample({name}={value}): give a count >= 0.")
    if num_timesteps is None and num_episodes is None:
        if config.batch_mode == "complete_episodes":
            return None, num_envs
        return int(config.rollout_length) * num_envs, None
    return num_timesteps, num_episodes


def build_module_or_none(
    config: AlgorithmConfig,
    observation_space: gym.Space[Any],
    action_space: gym.Space[Any],
    *,
    module_spaces: Mapping[str, tuple[gym.Space[Any], gym.Space[Any]]] | None = None,
) -> MultiRLModule | None:
    """The config's modules for these spaces, or None for a config that names no module (RLlib's
    ``AlgorithmConfig()`` without an algorithm: such a runner samples with ``random_actions=True`` only)."""
    try:
        specs = build_module_specs(config, observation_space, action_space, module_spaces=module_spaces)
    except NotImplementedError:
        return None
    module = MultiRLModule(specs)
    module.eval()
    return module


def act(
    module: MultiRLModule,
    module_id: str,
    observations: Sequence[Any],
    *,
    explore: bool,
    generator: torch.Generator,
) -> tuple[npt.NDArray[Any], list[dict[str, Any]]]:
    """The actions of ``module_id`` for a batch of observations (rows), and each row's other outputs.

    Raises:
        ValueError: The module is stateful (its memory is the batch sampler's: use the algorithm).
    """
    rl_module = module[module_id]
    if rl_module.get_initial_state():
        raise ValueError(
            f"Module {module_id!r} is stateful; the RLlib-API sample() feeds no state. Train it with the algorithm "
            "(whose env runners carry each episode's state), or sample with random_actions=True."
        )
    batch = {"obs": torch.as_tensor(np.stack([np.asarray(o, dtype=np.float32) for o in observations]))}
    with torch.no_grad():
        out = (
            rl_module.forward_exploration(batch, generator=generator) if explore else rl_module.forward_inference(batch)
        )
    actions = out["actions"].numpy()
    rows = [
        {key: value[i].numpy() for key, value in out.items() if key != "actions" and isinstance(value, torch.Tensor)}
        for i in range(len(observations))
    ]
    return actions, rows


def env_action(space: gym.Space[Any], action: Any) -> Any:
    """``action`` as the env takes it: clipped into a ``Box`` (RLlib's default action clipping)."""
    if isinstance(space, gym.spaces.Box):
        return np.clip(action, space.low, space.high)
    return action

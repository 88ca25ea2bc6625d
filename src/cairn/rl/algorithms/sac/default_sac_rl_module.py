"""DefaultSACRLModule: SAC's default module, a squashed Gaussian policy and twin Q-networks.

The networks are CleanRL's ``sac_continuous_action.py``: an MLP policy with a
mean head and a log-std head (``tanh``, rescaled into ``[-5, 2]``), whose
samples are squashed by ``tanh`` and scaled to the action bounds; two
Q-networks ``Q(s, a)``; and the entropy coefficient as a learned ``log_alpha``.

Everything SAC learns lives in this one module, ``log_alpha`` included, so a
module checkpoint (``RLModule.from_checkpoint``) is a whole SAC agent. The
target Q-networks are not here: they are the learner's target copy of the
module (:class:`~cairn.rl.algorithms.off_policy.TargetNetworkLearner`, shared
with DQN: one home for when and how targets move, and their counters). The
learner (:class:`~cairn.rl.algorithms.sac.sac_learner.SACLearner`) keeps one
optimizer per part: ``qf``, ``policy`` and ``alpha``.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from cairn.rl.core.rl_module.default_model_config import default_module_model_config
from cairn.rl.core.rl_module.rl_module import RLModule, box_observation_size

__all__ = ["DEFAULT_SAC_MODEL_CONFIG", "DefaultSACRLModule"]

DEFAULT_SAC_MODEL_CONFIG: dict[str, Any] = {
    "hidden_sizes": [256, 256],
    "initial_alpha": 1.0,
}
"""Keys a ``model_config`` of :class:`DefaultSACRLModule` may set, with their defaults (CleanRL's).

``hidden_sizes``: widths of the ReLU hidden layers of the policy and of each
Q-network. ``initial_alpha``: the entropy coefficient at the start
(``log_alpha = log(initial_alpha)``; CleanRL starts the tuned alpha at 1).
"""

LOG_STD_MIN = -5.0
LOG_STD_MAX = 2.0
_LOG_2PI = math.log(2.0 * math.pi)


def _mlp(in_dim: int, hidden: list[int], out_dim: int) -> nn.Sequential:
    layers: list[nn.Module] = []
    last = in_dim
    for width in hidden:
        layers += [nn.Linear(last, width), nn.ReLU()]
        last = width
    layers.append(nn.Linear(last, out_dim))
    return nn.Sequential(*layers)


class DefaultSACRLModule(RLModule):
    """Squashed Gaussian policy, twin Q-networks and ``log_alpha``.

    Layers: ``pi`` (obs -> 2 x act_dim: mean and raw log-std), ``qf1``, ``qf2``
    (obs ++ action -> 1), and the parameter ``log_alpha``.

    Args:
        observation_space: A ``Box`` space; observations are flattened.
        action_space: A one-dimensional, bounded ``Box``.
        model_config: Overrides of :data:`DEFAULT_SAC_MODEL_CONFIG`; unknown keys
            raise ``ValueError``.
        seed: Recorded; :meth:`RLModuleSpec.build` seeds torch's RNG with it for
            the initialisation (torch's default ``nn.Linear`` one, as CleanRL).

    Raises:
        ValueError: A space this module cannot handle, or an unknown model_config key.
    """

    # The layout of this class's own state; raise it (and implement upgrade_state) when it changes.
    STATE_VERSION = 1

    action_scale: torch.Tensor
    action_bias: torch.Tensor

    def __init__(
        self,
        observation_space: gym.Space[Any],
        action_space: gym.Space[Any],
        model_config: Mapping[str, Any] | None = None,
        *,
        seed: int | None = None,
    ) -> None:
        obs_dim = box_observation_size(observation_space, module_class=type(self))
        model_config = default_module_model_config(model_config)  # RLlib's key names (fcnet_hiddens) too
        if not (
            isinstance(action_space, gym.spaces.Box)
            and len(action_space.shape) == 1
            and bool(np.all(np.isfinite(action_space.low)))
            and bool(np.all(np.isfinite(action_space.high)))
        ):
            raise ValueError(
                f"SAC acts in a one-dimensional Box with finite bounds, got {action_space!r}: its policy squashes "
                "actions with tanh into the bounds. For discrete actions use DQN or PPO."
            )
        unknown = sorted(set(model_config or {}) - set(DEFAULT_SAC_MODEL_CONFIG))
        if unknown:
            raise ValueError(
                f"Unknown model_config keys {unknown} for DefaultSACRLModule; the known keys are "
                f"{sorted(DEFAULT_SAC_MODEL_CONFIG)}. A module of your own reads its own keys: "
                "RLModuleSpec(module_class=YourModule, model_config=...)."
            )
        config = {**DEFAULT_SAC_MODEL_CONFIG, **dict(model_config or {})}
        hidden = [int(h) for h in config["hidden_sizes"]]
        config["hidden_sizes"] = hidden
        config["initial_alpha"] = float(config["initial_alpha"])
        if config["initial_alpha"] <= 0.0:
            raise ValueError(f"model_config['initial_alpha'] must be positive, got {config['initial_alpha']}.")
        super().__init__(observation_space, action_space, config, seed=seed)
        self.obs_dim = obs_dim
        self.act_dim = int(action_space.shape[0])
        self.pi = _mlp(self.obs_dim, hidden, 2 * self.act_dim)
        self.qf1 = _mlp(self.obs_dim + self.act_dim, hidden, 1)
        self.qf2 = _mlp(self.obs_dim + self.act_dim, hidden, 1)
        self.log_alpha = nn.Parameter(torch.tensor([math.log(config["initial_alpha"])], dtype=torch.float32))
        # Buffers, so that they are saved with the weights and follow .to(device).
        low = torch.as_tensor(action_space.low, dtype=torch.float32)
        high = torch.as_tensor(action_space.high, dtype=torch.float32)
        self.register_buffer("action_scale", (high - low) / 2.0)
        self.register_buffer("action_bias", (high + low) / 2.0)

    # ------------------------------------------------------------------ parts, for the learner's optimizers

    def policy_parameters(self) -> Iterator[nn.Parameter]:
        """The policy's parameters (the ``policy`` optimizer's)."""
        return self.pi.parameters()

    def q_parameters(self) -> Iterator[nn.Parameter]:
        """Both Q-networks' parameters (the ``qf`` optimizer's)."""
        yield from self.qf1.parameters()
        yield from self.qf2.parameters()

    # ------------------------------------------------------------------ computations

    def _obs(self, obs: torch.Tensor) -> torch.Tensor:
        obs = torch.as_tensor(obs)
        return obs.reshape(obs.shape[0], self.obs_dim).to(torch.float32)

    def _mean_log_std(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mean, raw = self.pi(obs).chunk(2, dim=-1)
        log_std = LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (torch.tanh(raw) + 1.0)
        return mean, log_std

    def sample_actions(
        self, obs: torch.Tensor, *, generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Sampled actions in the bounds and their log-probabilities, with gradients (reparametrized).

        Args:
            obs: ``Tensor[B, *obs_shape]``.
            generator: The RNG of the Gaussian noise.

        Returns:
            ``(actions Tensor[B, act_dim], logp Tensor[B])``; ``logp`` includes the
            tanh and scaling correction (CleanRL's ``+ 1e-6`` inside the log).
        """
        mean, log_std = self._mean_log_std(self._obs(obs))
        std = log_std.exp()
        noise = torch.randn(mean.shape, generator=generator, dtype=mean.dtype)
        x = mean + std * noise
        y = torch.tanh(x)
        actions = y * self.action_scale + self.action_bias
        logp = (-0.5 * noise.pow(2) - log_std - 0.5 * _LOG_2PI).sum(-1)
        logp = logp - torch.log(self.action_scale * (1.0 - y.pow(2)) + 1e-6).sum(-1)
        return actions, logp

    def q_values(self, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """``Tensor[2, B]``: both Q-networks' values of ``(obs, actions)``."""
        x = torch.cat([self._obs(obs), torch.as_tensor(actions, dtype=torch.float32).reshape(-1, self.act_dim)], -1)
        return torch.stack([self.qf1(x).squeeze(-1), self.qf2(x).squeeze(-1)])

    @property
    def alpha(self) -> torch.Tensor:
        """The entropy coefficient ``exp(log_alpha)`` (a 1-element tensor, no gradient)."""
        return self.log_alpha.detach().exp()

    # ------------------------------------------------------------------ forward passes

    def forward_inference(self, batch: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Greedy actions: ``tanh(mean)`` scaled to the action bounds, ``{"actions": Tensor[B, act_dim]}``."""
        with torch.no_grad():
            mean, _ = self._mean_log_std(self._obs(batch["obs"]))
            actions = torch.tanh(mean) * self.action_scale + self.action_bias
        return {"actions": actions}

    def forward_exploration(
        self, batch: Mapping[str, torch.Tensor], *, generator: torch.Generator | None = None
    ) -> dict[str, torch.Tensor]:
        """Sampled actions (with ``generator``, the runner's) and their log-probabilities.

        Returns:
            ``{"actions": Tensor[B, act_dim], "action_logp": Tensor[B]}``.
        """
        with torch.no_grad():
            actions, logp = self.sample_actions(batch["obs"], generator=generator)
        return {"actions": actions, "action_logp": logp}

    def forward_train(self, batch: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Both Q-values of ``batch["obs"]``, ``batch["actions"]``, with gradients: ``{"q_values": Tensor[2, B]}``.

        The learner's losses also sample new actions (:meth:`sample_actions`) with its own generator.
        """
        return {"q_values": self.q_values(batch["obs"], batch["actions"])}

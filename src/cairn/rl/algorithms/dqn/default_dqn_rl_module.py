"""DefaultDQNRLModule: DQN's default module, an MLP from observations to one Q-value per action.

CleanRL's ``QNetwork``: two ReLU hidden layers (120, 84), torch's default
initialisation. The exploration epsilon is a buffer of the module (``epsilon``),
set by the algorithm with every weight sync to the env runners, so that
exploring needs nothing but the module and the runner's generator.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import torch
from torch import nn

from cairn.rl.core.rl_module.default_model_config import default_module_model_config
from cairn.rl.core.rl_module.rl_module import RLModule, box_observation_size

__all__ = ["DEFAULT_DQN_MODEL_CONFIG", "DefaultDQNRLModule"]

DEFAULT_DQN_MODEL_CONFIG: dict[str, Any] = {"hidden_sizes": [120, 84]}
"""Keys a ``model_config`` of :class:`DefaultDQNRLModule` may set: ``hidden_sizes``, the
widths of the ReLU hidden layers (CleanRL's ``QNetwork``)."""


class DefaultDQNRLModule(RLModule):
    """A Q-network for a ``Discrete`` action space: DQN's default module.

    * :meth:`forward_train`: ``{"q_values": Tensor[B, num_actions]}`` with gradients;
    * :meth:`forward_inference`: the greedy action (argmax of the Q-values);
    * :meth:`forward_exploration`: epsilon-greedy with the runner's generator:
      with probability :attr:`epsilon` a uniformly random action, else the greedy one.

    Args:
        observation_space: A ``Box`` space; observations are flattened.
        action_space: A ``Discrete`` space.
        model_config: Overrides of :data:`DEFAULT_DQN_MODEL_CONFIG`.
        seed: Recorded; :class:`~cairn.rl.core.rl_module.rl_module.RLModuleSpec` seeds the initialisation.

    Raises:
        ValueError: Other spaces, or an unknown ``model_config`` key.
    """

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
        if not isinstance(action_space, gym.spaces.Discrete):
            raise ValueError(
                f"DQN needs a Discrete action space, got {action_space!r}; use SAC for continuous actions."
            )
        unknown = sorted(set(model_config or {}) - set(DEFAULT_DQN_MODEL_CONFIG))
        if unknown:
            raise ValueError(
                f"Unknown model_config keys {unknown} for DefaultDQNRLModule; the known keys are "
                f"{sorted(DEFAULT_DQN_MODEL_CONFIG)}."
            )
        config = {**DEFAULT_DQN_MODEL_CONFIG, **dict(model_config or {})}
        config["hidden_sizes"] = [int(h) for h in config["hidden_sizes"]]
        super().__init__(observation_space, action_space, config, seed=seed)
        self.obs_dim = obs_dim
        self.num_actions = int(action_space.n)
        layers: list[nn.Module] = []
        last = self.obs_dim
        for width in config["hidden_sizes"]:
            layers += [nn.Linear(last, width), nn.ReLU()]
            last = width
        layers.append(nn.Linear(last, self.num_actions))
        self.q_net = nn.Sequential(*layers)
        # The exploration rate the env runners act with (a buffer: it travels with the weights).
        self.epsilon: torch.Tensor
        self.register_buffer("epsilon", torch.zeros((), dtype=torch.float32))

    def _obs(self, batch: Mapping[str, torch.Tensor]) -> torch.Tensor:
        obs = torch.as_tensor(batch["obs"])
        return obs.reshape(obs.shape[0], self.obs_dim).to(torch.float32)

    def forward_train(self, batch: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """``{"q_values": Tensor[B, num_actions]}`` of ``batch["obs"]``, with gradients."""
        return {"q_values": self.q_net(self._obs(batch))}

    def forward_inference(self, batch: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """``{"actions": Tensor[B]}`` (int64): the action of the highest Q-value."""
        with torch.no_grad():
            return {"actions": self.q_net(self._obs(batch)).argmax(-1)}

    def forward_exploration(
        self, batch: Mapping[str, torch.Tensor], *, generator: torch.Generator | None = None
    ) -> dict[str, torch.Tensor]:
        """``{"actions": Tensor[B]}``: epsilon-greedy, drawing only from ``generator``."""
        with torch.no_grad():
            greedy = self.q_net(self._obs(batch)).argmax(-1)
            size = greedy.shape[0]
            explore = torch.rand(size, generator=generator) < self.epsilon
            random_actions = torch.randint(0, self.num_actions, (size,), generator=generator)
            return {"actions": torch.where(explore, random_actions, greedy)}

"""DefaultPPORLModule: PPO's default module, an MLP actor-critic (CleanRL style).

Two MLPs (policy and value), tanh hidden layers, orthogonal initialisation
(policy head gain 0.01, value head gain 1). Discrete actions use a
categorical distribution over logits; ``Box`` actions a diagonal Gaussian
whose log standard deviation is a learned, state-independent parameter.
This was cairn 0.1's only ``RLModule``; its checkpoints (class
``cairn.rl.rl_module:RLModule``) build this class.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import torch
from torch import nn

from cairn.rl._aliases import register_old_paths
from cairn.rl.core.rl_module.default_model_config import default_module_model_config
from cairn.rl.core.rl_module.rl_module import RLModule, RLModuleSpec, box_observation_size

__all__ = ["DEFAULT_MODEL_CONFIG", "DefaultPPORLModule"]

DEFAULT_MODEL_CONFIG: dict[str, Any] = {
    "hidden_sizes": [64, 64],
    "activation": "tanh",
    "log_std_init": 0.0,
}
"""Keys a ``model_config`` of :class:`DefaultPPORLModule` may set, with their defaults.

``hidden_sizes``: widths of the hidden layers of both MLPs. ``activation``:
``"tanh"`` or ``"relu"``. ``log_std_init``: initial log standard deviation of
the Gaussian for ``Box`` action spaces.
"""

_ACTIVATIONS: dict[str, type[nn.Module]] = {"tanh": nn.Tanh, "relu": nn.ReLU}
_LOG_2PI = math.log(2.0 * math.pi)


def _mlp(in_dim: int, hidden: list[int], out_dim: int, activation: type[nn.Module]) -> nn.Sequential:
    layers: list[nn.Module] = []
    last = in_dim
    for width in hidden:
        layers += [nn.Linear(last, width), activation()]
        last = width
    layers.append(nn.Linear(last, out_dim))
    return nn.Sequential(*layers)


def _init_mlp(net: nn.Sequential, head_gain: float, generator: torch.Generator | None) -> None:
    linears = [m for m in net if isinstance(m, nn.Linear)]
    with torch.no_grad():
        for i, layer in enumerate(linears):
            gain = head_gain if i == len(linears) - 1 else math.sqrt(2.0)
            nn.init.orthogonal_(layer.weight, gain=gain, generator=generator)
            layer.bias.zero_()


class DefaultPPORLModule(RLModule):
    """A torch actor-critic for one policy: PPO's default module.

    Args:
        observation_space: A ``Box`` space; observations are flattened.
        action_space: ``Discrete`` or a one-dimensional ``Box``.
        model_config: Overrides of :data:`DEFAULT_MODEL_CONFIG`; unknown keys
            raise ``ValueError``.
        seed: Seed of the weight initialisation (a private ``torch.Generator``,
            as in cairn 0.1, so weights are bit for bit those of 0.1); ``None``
            uses torch's global RNG.

    Raises:
        ValueError: A space this module cannot handle, or an unknown model_config key.
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
        if isinstance(action_space, gym.spaces.Discrete):
            discrete = True
            out_dim = int(action_space.n)
        elif isinstance(action_space, gym.spaces.Box) and len(action_space.shape) == 1:
            discrete = False
            out_dim = int(action_space.shape[0])
        else:
            raise ValueError(
                f"DefaultPPORLModule supports Discrete and one-dimensional Box action spaces, got {action_space!r}."
            )
        unknown = sorted(set(model_config or {}) - set(DEFAULT_MODEL_CONFIG))
        if unknown:
            raise ValueError(
                f"Unknown model_config keys {unknown} for DefaultPPORLModule; the known keys are "
                f"{sorted(DEFAULT_MODEL_CONFIG)}. A module of your own reads its own keys: "
                "RLModuleSpec(module_class=YourModule, model_config=...)."
            )
        config = {**DEFAULT_MODEL_CONFIG, **dict(model_config or {})}
        activation = _ACTIVATIONS.get(str(config["activation"]))
        if activation is None:
            raise ValueError(
                f"model_config['activation']={config['activation']!r} is not one of {sorted(_ACTIVATIONS)}."
            )
        hidden = [int(h) for h in config["hidden_sizes"]]
        config["hidden_sizes"] = hidden
        config["log_std_init"] = float(config["log_std_init"])
        super().__init__(observation_space, action_space, config, seed=seed)
        self.discrete = discrete
        self.obs_dim = obs_dim
        self.pi = _mlp(self.obs_dim, hidden, out_dim, activation)
        self.vf = _mlp(self.obs_dim, hidden, 1, activation)
        generator = None if seed is None else torch.Generator().manual_seed(int(seed))
        _init_mlp(self.pi, 0.01, generator)
        _init_mlp(self.vf, 1.0, generator)
        if not self.discrete:
            self.log_std = nn.Parameter(torch.full((out_dim,), config["log_std_init"]))

    def _obs(self, batch: Mapping[str, torch.Tensor]) -> torch.Tensor:
        obs = torch.as_tensor(batch["obs"])
        return obs.reshape(obs.shape[0], self.obs_dim).to(torch.float32)

    def _logp_entropy(self, dist_inputs: torch.Tensor, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.discrete:
            logp_all = torch.log_softmax(dist_inputs, dim=-1)
            logp = logp_all.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)
            entropy = -(logp_all.exp() * logp_all).sum(-1)
            return logp, entropy
        log_std = self.log_std.expand_as(dist_inputs)
        z = (actions - dist_inputs) / log_std.exp()
        logp = (-0.5 * z.pow(2) - log_std - 0.5 * _LOG_2PI).sum(-1)
        entropy = (0.5 + 0.5 * _LOG_2PI + log_std).sum(-1)
        return logp, entropy

    def forward_inference(self, batch: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Greedy actions: the most likely action (Discrete) or the mean (Box).

        Returns:
            ``{"actions": Tensor[B]}`` (int64) or ``Tensor[B, act_dim]`` (float32).
        """
        with torch.no_grad():
            dist_inputs = self.pi(self._obs(batch))
            actions = dist_inputs.argmax(-1) if self.discrete else dist_inputs
        return {"actions": actions}

    def forward_exploration(
        self, batch: Mapping[str, torch.Tensor], *, generator: torch.Generator | None = None
    ) -> dict[str, torch.Tensor]:
        """Sampled actions, their log-probabilities and the value estimates.

        Returns:
            ``{"actions", "action_logp", "vf_preds", "action_dist_inputs"}``.
        """
        with torch.no_grad():
            obs = self._obs(batch)
            dist_inputs = self.pi(obs)
            if self.discrete:
                probs = torch.softmax(dist_inputs, dim=-1)
                actions = torch.multinomial(probs, 1, generator=generator).squeeze(-1)
            else:
                noise = torch.randn(dist_inputs.shape, generator=generator)
                actions = dist_inputs + self.log_std.exp() * noise
            logp, _ = self._logp_entropy(dist_inputs, actions)
            values = self.vf(obs).squeeze(-1)
        return {
            "actions": actions,
            "action_logp": logp,
            "vf_preds": values,
            "action_dist_inputs": dist_inputs,
        }

    def forward_train(self, batch: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """``{"action_logp", "entropy", "vf_preds"}`` of ``batch["obs"]``, ``batch["actions"]``, with gradients."""
        obs = self._obs(batch)
        dist_inputs = self.pi(obs)
        logp, entropy = self._logp_entropy(dist_inputs, torch.as_tensor(batch["actions"]))
        return {"action_logp": logp, "entropy": entropy, "vf_preds": self.vf(obs).squeeze(-1)}

    def compute_values(self, batch: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """Value estimates ``Tensor[B]`` without gradients."""
        with torch.no_grad():
            values: torch.Tensor = self.vf(self._obs(batch)).squeeze(-1)
        return values


register_old_paths(DefaultPPORLModule)
# A spec without a class (0.1's RLModuleSpec(obs, act), or one written by hand) builds this module.
RLModuleSpec.default_module_class = DefaultPPORLModule

"""RLModule: a torch actor-critic that is also a cairn ``Checkpointable``.

Two MLPs (policy and value), CleanRL style: tanh hidden layers, orthogonal
initialisation (policy head gain 0.01, value head gain 1). Discrete actions use
a categorical distribution over logits; ``Box`` actions a diagonal Gaussian
whose log standard deviation is a learned, state-independent parameter.

A module is built from ``(observation_space, action_space, model_config)``
and its state is its ``state_dict`` as tensors, so that::

    module = RLModule.from_checkpoint(ckpt + "/learner_group/learner/rl_module/default_policy")
    module.forward_inference({"obs": torch.as_tensor(obs[None])})["actions"]

gives a module ready to act, without building an algorithm.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from cairn import Checkpointable
from cairn.errors import IncompatibleCheckpointError
from cairn.registry import register_type
from cairn.rl._aliases import register_old_paths
from cairn.rl.utils._util import Names

__all__ = ["DEFAULT_MODEL_CONFIG", "RLModule", "RLModuleSpec"]

DEFAULT_MODEL_CONFIG: dict[str, Any] = {
    "hidden_sizes": [64, 64],
    "activation": "tanh",
    "log_std_init": 0.0,
}
"""Keys a ``model_config`` may set, with their defaults.

``hidden_sizes``: widths of the hidden layers of both MLPs. ``activation``:
``"tanh"`` or ``"relu"``. ``log_std_init``: initial log standard deviation of
the Gaussian for ``Box`` action spaces.
"""

_ACTIVATIONS: dict[str, type[nn.Module]] = {"tanh": nn.Tanh, "relu": nn.ReLU}
_LOG_2PI = math.log(2.0 * math.pi)


@register_type
@dataclass
class RLModuleSpec:
    """Everything needed to build an :class:`RLModule`.

    Attributes:
        observation_space: A ``Box`` observation space.
        action_space: A ``Discrete`` or one-dimensional ``Box`` action space.
        model_config: Overrides of :data:`DEFAULT_MODEL_CONFIG`.
        seed: Seed of the weight initialisation; ``None`` draws from torch's global RNG.
    """

    observation_space: gym.Space[Any]
    action_space: gym.Space[Any]
    model_config: dict[str, Any] = field(default_factory=dict)
    seed: int | None = None

    def build(self) -> RLModule:
        """Build a new module from this spec."""
        return RLModule(self.observation_space, self.action_space, self.model_config, seed=self.seed)


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


class RLModule(nn.Module, Checkpointable):
    """A torch actor-critic for one policy.

    Args:
        observation_space: A ``Box`` space; observations are flattened.
        action_space: ``Discrete`` or a one-dimensional ``Box``.
        model_config: Overrides of :data:`DEFAULT_MODEL_CONFIG`; unknown keys
            raise ``ValueError``.
        seed: Seed of the weight initialisation (a private ``torch.Generator``,
            the global RNG is not touched); ``None`` uses torch's global RNG.

    Raises:
        ValueError: A space this module cannot handle, or an unknown model_config key.
    """

    # The layout of this class's own state; raise it (and implement upgrade_state) when it changes.
    STATE_VERSION = 1

    def __init__(
        self,
        observation_space: gym.Space[Any],
        action_space: gym.Space[Any],
        model_config: Mapping[str, Any] | None = None,
        *,
        seed: int | None = None,
    ) -> None:
        nn.Module.__init__(self)
        if not isinstance(observation_space, gym.spaces.Box):
            raise ValueError(
                f"RLModule needs a Box observation space, got {observation_space!r}; "
                "flatten or one-hot other spaces with a gymnasium wrapper first."
            )
        if isinstance(action_space, gym.spaces.Discrete):
            self.discrete = True
            out_dim = int(action_space.n)
        elif isinstance(action_space, gym.spaces.Box) and len(action_space.shape) == 1:
            self.discrete = False
            out_dim = int(action_space.shape[0])
        else:
            raise ValueError(f"RLModule supports Discrete and one-dimensional Box action spaces, got {action_space!r}.")
        unknown = sorted(set(model_config or {}) - set(DEFAULT_MODEL_CONFIG))
        if unknown:
            raise ValueError(f"Unknown model_config keys {unknown}; the known keys are {sorted(DEFAULT_MODEL_CONFIG)}.")
        config = {**DEFAULT_MODEL_CONFIG, **dict(model_config or {})}
        activation = _ACTIVATIONS.get(str(config["activation"]))
        if activation is None:
            raise ValueError(
                f"model_config['activation']={config['activation']!r} is not one of {sorted(_ACTIVATIONS)}."
            )
        hidden = [int(h) for h in config["hidden_sizes"]]
        config["hidden_sizes"] = hidden
        config["log_std_init"] = float(config["log_std_init"])

        self.observation_space = observation_space
        self.action_space = action_space
        self.model_config: dict[str, Any] = config
        self.seed = seed
        self.obs_dim = int(np.prod(observation_space.shape))
        self.pi = _mlp(self.obs_dim, hidden, out_dim, activation)
        self.vf = _mlp(self.obs_dim, hidden, 1, activation)
        generator = None if seed is None else torch.Generator().manual_seed(int(seed))
        _init_mlp(self.pi, 0.01, generator)
        _init_mlp(self.vf, 1.0, generator)
        if not self.discrete:
            self.log_std = nn.Parameter(torch.full((out_dim,), config["log_std_init"]))

    @property
    def spec(self) -> RLModuleSpec:
        """The spec this module was built from."""
        return RLModuleSpec(self.observation_space, self.action_space, dict(self.model_config), self.seed)

    # ------------------------------------------------------------------ forward passes

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

        Args:
            batch: ``{"obs": Tensor[B, *obs_shape]}``.

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

        Args:
            batch: ``{"obs": Tensor[B, *obs_shape]}``.
            generator: The RNG to sample with (the caller owns it, so that
                sampling is reproducible and checkpointable); ``None`` uses
                torch's global RNG.

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
        """What the loss needs, with gradients.

        Args:
            batch: ``{"obs": Tensor[B, ...], "actions": Tensor[B, ...]}``.

        Returns:
            ``{"action_logp", "entropy", "vf_preds"}``, each ``Tensor[B]``.
        """
        obs = self._obs(batch)
        dist_inputs = self.pi(obs)
        logp, entropy = self._logp_entropy(dist_inputs, torch.as_tensor(batch["actions"]))
        return {"action_logp": logp, "entropy": entropy, "vf_preds": self.vf(obs).squeeze(-1)}

    def compute_values(self, batch: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """Value estimates ``Tensor[B]`` without gradients."""
        with torch.no_grad():
            values: torch.Tensor = self.vf(self._obs(batch)).squeeze(-1)
        return values

    def forward(self, batch: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Same as :meth:`forward_train`."""
        return self.forward_train(batch)

    # ------------------------------------------------------------------ Checkpointable

    def get_state(self, components: Names = None, *, not_components: Names = None, **kwargs: Any) -> dict[str, Any]:
        """The module's ``state_dict``: parameter name -> tensor (a copy)."""
        return {name: value.detach().clone() for name, value in self.state_dict().items()}

    def get_state_buffers(self) -> dict[str, Any] | None:
        """The live parameters and buffers (no copies): a restore from local disk reads into them."""
        return dict(self.state_dict())

    def set_state(self, state: dict[str, Any]) -> None:
        """Load tensors from ``state``; parameters missing from it are left as they are.

        Raises:
            IncompatibleCheckpointError: An unknown parameter name or a shape that
                does not match this module (another architecture or other spaces).
        """
        own = self.state_dict()
        unknown = sorted(set(state) - set(own))
        if unknown:
            raise IncompatibleCheckpointError(
                f"The RLModule state holds parameters {unknown} that this module "
                f"({self.observation_space} -> {self.action_space}, model_config="
                f"{self.model_config}) does not have; the checkpoint was written by "
                "another architecture."
            )
        with torch.no_grad():
            for name, value in state.items():
                tensor = torch.as_tensor(value)
                target = own[name]
                if tuple(tensor.shape) != tuple(target.shape):
                    raise IncompatibleCheckpointError(
                        f"RLModule parameter {name!r} has shape {tuple(tensor.shape)} in the "
                        f"checkpoint but {tuple(target.shape)} in this module (observation "
                        f"space {self.observation_space}, action space {self.action_space}, "
                        f"model_config {self.model_config}); build the module with the "
                        "checkpoint's spaces and model_config, or use from_checkpoint."
                    )
                target.copy_(tensor.to(dtype=target.dtype, device=target.device))

    def get_ctor_args_and_kwargs(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """``((observation_space, action_space), {"model_config": ..., "seed": ...})``."""
        return (
            (self.observation_space, self.action_space),
            {"model_config": dict(self.model_config), "seed": self.seed},
        )

    def get_metadata(self) -> dict[str, Any]:
        """Adds the spaces (as text) and the number of parameters."""
        metadata = dict(super().get_metadata())
        metadata.update(
            {
                "observation_space": str(self.observation_space),
                "action_space": str(self.action_space),
                "num_parameters": int(sum(p.numel() for p in self.parameters())),
            }
        )
        return metadata


register_old_paths(RLModule, RLModuleSpec)

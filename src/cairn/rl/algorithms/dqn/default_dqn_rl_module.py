"""DefaultDQNRLModule: DQN's default module, an MLP from observations to one Q-value per action.

CleanRL's ``QNetwork`` by default: two ReLU hidden layers (120, 84), torch's default
initialisation. RLlib's ``DefaultDQNTorchRLModule`` settings on top: a head of its own
(``head_fcnet_hiddens``), zero biases, and the dueling architecture (Wang et al.,
2016; ``dueling=True``): a value stream and an advantage stream on the shared
layers, ``Q = V + A - mean(A)``. The exploration epsilon is a buffer of the module
(``epsilon``), set by the algorithm with every weight sync to the env runners, so
that exploring needs nothing but the module and the runner's generator.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import torch
from torch import nn

from cairn._ctor_bounds import FolderSizes, alloc_limit, mlp_parameter_bytes
from cairn.rl.core.rl_module.default_layers import linear_layers
from cairn.rl.core.rl_module.default_model_config import check_activation, check_widths, default_module_model_config
from cairn.rl.core.rl_module.rl_module import RLModule, box_observation_size

__all__ = ["DEFAULT_DQN_MODEL_CONFIG", "DefaultDQNRLModule", "dqn_parameter_bytes"]

DEFAULT_DQN_MODEL_CONFIG: dict[str, Any] = {
    "hidden_sizes": [120, 84],
    "activation": "relu",
    "head_fcnet_hiddens": [],
    "head_fcnet_activation": "relu",
    "fcnet_bias_initializer": None,
    "head_fcnet_bias_initializer": None,
    "dueling": False,
}
"""Keys a ``model_config`` of :class:`DefaultDQNRLModule` may set:

* ``hidden_sizes`` (RLlib's ``fcnet_hiddens``), ``activation`` (``fcnet_activation``,
  one of ``ACTIVATION_NAMES``: ``"relu"``, ``"tanh"``, ``"linear"``/``None``, ``"swish"``/``"silu"``,
  ``"elu"``): the shared layers (CleanRL's ``QNetwork``: 120, 84, ReLU);
* ``head_fcnet_hiddens``, ``head_fcnet_activation``: hidden layers of the head (of each
  stream when dueling) before its output layer (RLlib's names; none by default);
* ``fcnet_bias_initializer``, ``head_fcnet_bias_initializer``: ``None`` (torch's default)
  or ``"zeros_"`` (RLlib's names; the only initializer cairn takes);
* ``dueling``: a value and an advantage stream, ``Q = V + A - mean(A)`` (DQNConfig's
  ``dueling=True`` sets it)."""


def _layers(sizes: list[int], first: int, activation: str) -> tuple[list[nn.Module], int]:
    """Linear + activation per width (the layers every default module builds); the layers and the last width."""
    return linear_layers(first, sizes, activation, "DefaultDQNRLModule: model_config activation")


def _check_model_config(config: dict[str, Any]) -> dict[str, Any]:
    """``config`` with ints for widths; ``ValueError`` naming the key that cannot be built."""
    for key in ("hidden_sizes", "head_fcnet_hiddens"):
        config[key] = check_widths(config[key], f"DefaultDQNRLModule: model_config[{key!r}]")
    for key in ("activation", "head_fcnet_activation"):
        check_activation(config[key], f"DefaultDQNRLModule: model_config[{key!r}]")
    for key in ("fcnet_bias_initializer", "head_fcnet_bias_initializer"):
        if config[key] not in (None, "zeros_"):
            raise ValueError(
                f"DefaultDQNRLModule: model_config[{key!r}]={config[key]!r:.40} is refused: cairn takes None "
                "(torch's default) or 'zeros_'."
            )
    if not isinstance(config["dueling"], bool):
        raise ValueError(f"DefaultDQNRLModule: model_config['dueling'] must be a bool, got {config['dueling']!r:.40}.")
    return config


def dqn_parameter_bytes(model_config: Any) -> int:
    """A lower bound of the parameter bytes of the Q-network a ``model_config`` asks for: the
    hidden-to-hidden weights of the shared layers and the head (0 for values the module refuses)."""
    if not isinstance(model_config, Mapping):
        return 0
    hidden = model_config.get(
        "hidden_sizes", model_config.get("fcnet_hiddens", DEFAULT_DQN_MODEL_CONFIG["hidden_sizes"])
    )
    head = model_config.get("head_fcnet_hiddens", [])
    try:
        return mlp_parameter_bytes([*hidden, *head])
    except (ValueError, TypeError):
        return 0  # not MLP widths: the constructor refuses them


def _zero_biases(layers: list[nn.Module]) -> None:
    with torch.no_grad():
        for layer in layers:
            if isinstance(layer, nn.Linear):
                layer.bias.zero_()


class DefaultDQNRLModule(RLModule):
    """A Q-network for a ``Discrete`` action space: DQN's default module.

    * :meth:`forward_train`: ``{"q_values": Tensor[B, num_actions]}`` with gradients;
    * :meth:`forward_inference`: the greedy action (argmax of the Q-values);
    * :meth:`forward_exploration`: epsilon-greedy with the runner's generator:
      with probability :attr:`epsilon` a uniformly random action, else the greedy one.

    Without ``dueling`` the network is one ``nn.Sequential``, ``q_net`` (the shared
    layers, the head's, the output layer). With ``dueling`` it is ``encoder`` (the shared
    layers) and two streams on it, ``value_head`` (to one value) and ``advantage_head``
    (to one advantage per action): ``Q(s, a) = V(s) + A(s, a) - mean_a' A(s, a')``
    (Wang et al., 2016: the mean keeps V and A identifiable).

    Args:
        observation_space: A ``Box`` space; observations are flattened.
        action_space: A ``Discrete`` space.
        model_config: Overrides of :data:`DEFAULT_DQN_MODEL_CONFIG`.
        seed: Recorded; :class:`~cairn.rl.core.rl_module.rl_module.RLModuleSpec` seeds the initialisation.

    Raises:
        ValueError: Other spaces, or an unknown or bad ``model_config`` key.
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
        config = _check_model_config({**DEFAULT_DQN_MODEL_CONFIG, **dict(model_config or {})})
        # Recorded: the widths and the keys given (a config of the defaults records as it always did).
        recorded = {"hidden_sizes": config["hidden_sizes"], **{k: config[k] for k in model_config or {}}}
        super().__init__(observation_space, action_space, recorded, seed=seed)
        self.obs_dim = obs_dim
        self.num_actions = int(action_space.n)
        self.dueling = bool(config["dueling"])
        trunk, last = _layers(config["hidden_sizes"], self.obs_dim, config["activation"])
        if config["fcnet_bias_initializer"] == "zeros_":
            _zero_biases(trunk)
        heads: list[list[nn.Module]] = []
        for outputs in (self.num_actions, 1) if self.dueling else (self.num_actions,):
            hidden, width = _layers(config["head_fcnet_hiddens"], last, config["head_fcnet_activation"])
            heads.append([*hidden, nn.Linear(width, outputs)])
            if config["head_fcnet_bias_initializer"] == "zeros_":
                _zero_biases(heads[-1])
        if self.dueling:
            self.encoder = nn.Sequential(*trunk)
            self.advantage_head = nn.Sequential(*heads[0])
            self.value_head = nn.Sequential(*heads[1])
        else:
            self.q_net = nn.Sequential(*trunk, *heads[0])  # the names of cairn's earlier checkpoints
        # The exploration rate the env runners act with (a buffer: it travels with the weights).
        self.epsilon: torch.Tensor
        self.register_buffer("epsilon", torch.zeros((), dtype=torch.float32))

    @classmethod
    def ctor_args_problem(cls, args: tuple[Any, ...], kwargs: dict[str, Any], folder: FolderSizes) -> str | None:
        """The hook of :mod:`cairn._ctor_bounds`: the shared layers and the head (``head_fcnet_hiddens``)
        must fit what the module's folder holds."""
        problem = super().ctor_args_problem(args, kwargs, folder)  # the shared layers alone
        if problem is not None:
            return problem
        model_config = kwargs.get("model_config", args[2] if len(args) > 2 else None)
        lower = dqn_parameter_bytes(model_config)
        if lower > alloc_limit(folder.tree_bytes):
            return (
                f"model_config {str(model_config)[:120]} makes at least {lower} bytes of parameters, and the "
                f"module's folder holds {folder.tree_bytes} bytes"
            )
        return None

    def q_values(self, obs: torch.Tensor) -> torch.Tensor:
        """``Tensor[B, num_actions]``: the Q-values of flat float observations."""
        if not self.dueling:
            return self.q_net(obs)  # type: ignore[no-any-return]
        features = self.encoder(obs)
        advantages = self.advantage_head(features)
        return self.value_head(features) + advantages - advantages.mean(dim=-1, keepdim=True)  # type: ignore[no-any-return]

    def _obs(self, batch: Mapping[str, torch.Tensor]) -> torch.Tensor:
        obs = torch.as_tensor(batch["obs"])
        return obs.reshape(obs.shape[0], self.obs_dim).to(torch.float32)

    def forward_train(self, batch: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """``{"q_values": Tensor[B, num_actions]}`` of ``batch["obs"]``, with gradients."""
        return {"q_values": self.q_values(self._obs(batch))}

    def forward_inference(self, batch: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """``{"actions": Tensor[B]}`` (int64): the action of the highest Q-value."""
        with torch.no_grad():
            return {"actions": self.q_values(self._obs(batch)).argmax(-1)}

    def forward_exploration(
        self, batch: Mapping[str, torch.Tensor], *, generator: torch.Generator | None = None
    ) -> dict[str, torch.Tensor]:
        """``{"actions": Tensor[B]}``: epsilon-greedy, drawing only from ``generator``."""
        with torch.no_grad():
            greedy = self.q_values(self._obs(batch)).argmax(-1)
            size = greedy.shape[0]
            explore = torch.rand(size, generator=generator) < self.epsilon
            random_actions = torch.randint(0, self.num_actions, (size,), generator=generator)
            return {"actions": torch.where(explore, random_actions, greedy)}

"""RLlib's ``ActionMaskingTorchRLModule``: a PPO module that never picks an action the env masks.

``ray.rllib.examples.rl_modules.classes.action_masking_rlm``. The env's observation is a
``Dict`` ``{"action_mask": Box(0, 1, (n,)), "observations": <space>}``
(:class:`~cairn.rl.examples.envs.classes.action_mask_env.ActionMaskEnv`); the module builds
its networks for ``observations`` alone and adds ``log(action_mask)`` (clamped at the
lowest float) to the action logits, so that a masked action has probability 0 when sampled,
is never the greedy action, and its log-probability in ``forward_train`` is about -3.4e38.

Differs from RLlib's:

* RLlib's ``ActionMaskingRLModule`` + ``ActionMaskingTorchRLModule`` (a subclass of RLlib's
  ``PPOTorchRLModule``) -> one class on cairn's
  :class:`~cairn.rl.core.rl_module.torch.torch_rl_module.TorchRLModule` and
  ``ValueFunctionAPI``, with its own MLP policy and value networks (``fcnet_hiddens``,
  default ``[256, 256]``, and ``fcnet_activation``, ``"tanh"`` or ``"relu"``, default tanh;
  RLlib's PPO module reads ``head_fcnet_hiddens`` / ``head_fcnet_activation`` for the heads
  after its encoder: here those keys, when given, set the networks' layers): cairn's default
  PPO module is not written the RLlib way (``_forward`` returning ``action_dist_inputs``),
  which the masking needs.
* ``takes_nested_observations = True``: cairn hands a module Dict observations unflattened
  only when it says it reads them (RLlib hands any module whatever its pipeline gives).
* RLlib swaps ``config.observation_space`` around ``super().__init__``; here the module keeps
  the Dict space (what it reads, what checkpoints record) and sizes its networks from
  ``observation_space["observations"]``. ``_preprocess_batch`` copies the batch instead of
  popping its keys: cairn's env runner and learner may hand the same dict to two passes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from cairn.rl.core.columns import Columns
from cairn.rl.core.rl_module.apis.value_function_api import ValueFunctionAPI
from cairn.rl.core.rl_module.torch.torch_rl_module import TorchRLModule

__all__ = ["FLOAT_MIN", "ActionMaskingTorchRLModule"]

FLOAT_MIN = float(torch.finfo(torch.float32).min)
"""RLlib's ``ray.rllib.utils.torch_utils.FLOAT_MIN``: the logit offset of a masked action."""


_ACTIVATIONS: dict[str, type[nn.Module]] = {"tanh": nn.Tanh, "relu": nn.ReLU}


def _mlp(inputs: int, hidden: list[int], outputs: int, gain: float, activation: type[nn.Module]) -> nn.Sequential:
    layers: list[nn.Module] = []
    last = inputs
    for width in hidden:
        layers += [nn.Linear(last, width), activation()]
        last = width
    layers.append(nn.Linear(last, outputs))
    with torch.no_grad():
        for i, layer in enumerate(layers):
            if isinstance(layer, nn.Linear):
                nn.init.orthogonal_(layer.weight, gain=gain if i == len(layers) - 1 else float(np.sqrt(2.0)))
                layer.bias.zero_()
    return nn.Sequential(*layers)


class ActionMaskingTorchRLModule(TorchRLModule, ValueFunctionAPI):
    """A PPO module that masks the action logits with the observation's ``action_mask``.

    Raises:
        ValueError: The observation space is not a ``Dict`` with ``action_mask`` and a ``Box``
            ``observations``, or the action space is not ``Discrete`` of the mask's size.
    """

    takes_nested_observations: ClassVar[bool] = True

    def setup(self) -> None:
        """Build the policy and value networks for ``observation_space["observations"]``."""
        space = self.observation_space
        # If observation space is not of type `Dict` raise an error.
        if not isinstance(space, gym.spaces.Dict) or set(space.spaces) != {"action_mask", "observations"}:
            raise ValueError(
                "This RLModule requires the environment to provide a `gym.spaces.Dict` observation space of the "
                "form: {'action_mask': Box(0.0, 1.0, shape=(action_space.n,)), 'observations': <a Box space>}; "
                f"got {space!r}."
            )
        inner, mask = space["observations"], space["action_mask"]
        if not isinstance(self.action_space, gym.spaces.Discrete) or tuple(mask.shape or ()) != (
            int(getattr(self.action_space, "n", -1)),
        ):
            raise ValueError(
                f"ActionMaskingTorchRLModule masks a Discrete action space of the mask's size; got actions "
                f"{self.action_space!r} and action_mask {mask!r}."
            )
        if not isinstance(inner, gym.spaces.Box):
            raise ValueError(f"ActionMaskingTorchRLModule reads Box 'observations', got {inner!r}.")
        hidden = self.model_config.get("head_fcnet_hiddens", self.model_config.get("fcnet_hiddens", [256, 256]))
        name = self.model_config.get("head_fcnet_activation", self.model_config.get("fcnet_activation", "tanh"))
        if name not in _ACTIVATIONS:
            raise ValueError(f"ActionMaskingTorchRLModule's activation is one of {sorted(_ACTIVATIONS)}, got {name!r}.")
        self._obs_dim = int(np.prod(inner.shape))
        widths = [int(w) for w in hidden]
        self.pi = _mlp(self._obs_dim, widths, int(self.action_space.n), 0.01, _ACTIVATIONS[name])
        self.vf = _mlp(self._obs_dim, widths, 1, 1.0, _ACTIVATIONS[name])

    def _forward(self, batch: Mapping[str, Any], **kwargs: Any) -> dict[str, Any]:
        """Masked ``action_dist_inputs`` of the batch (every pass: inference, exploration, train)."""
        # Preprocess the original batch to extract the action mask.
        action_mask, batch = self._preprocess_batch(batch)
        logits = self.pi(self._flat(batch[Columns.OBS]))
        # Mask the action logits and return.
        return self._mask_action_logits({Columns.ACTION_DIST_INPUTS: logits}, action_mask)

    def compute_values(self, batch: Mapping[str, Any], embeddings: Any | None = None) -> torch.Tensor:
        """Value estimates ``Tensor[B]`` of the batch's ``observations`` (the mask is not read)."""
        # Preprocess the batch to extract the `observations` to `Columns.OBS`.
        _, batch = self._preprocess_batch(batch)
        values: torch.Tensor = self.vf(self._flat(batch[Columns.OBS])).squeeze(-1)
        return values

    def _flat(self, obs: Any) -> torch.Tensor:
        tensor = torch.as_tensor(obs)
        return tensor.reshape(tensor.shape[0], self._obs_dim).to(torch.float32)

    def _preprocess_batch(self, batch: Mapping[str, Any]) -> tuple[torch.Tensor, dict[str, Any]]:
        """The action mask, and a copy of the batch whose ``Columns.OBS`` is the ``observations`` alone.

        Raises:
            ValueError: ``batch[Columns.OBS]`` is not a dict with ``action_mask`` and ``observations``.
        """
        obs = batch[Columns.OBS]
        # Check observation specs for action mask and observation keys.
        if not isinstance(obs, Mapping) or "action_mask" not in obs or "observations" not in obs:
            raise ValueError(
                "No action mask or observations found in the observation. This RLModule requires the environment "
                "to provide observations that include an action mask (a Dict observation space "
                "{'action_mask': Box(0.0, 1.0, shape=(action_space.n,)), 'observations': <space>}), handed to the "
                "module unflattened (no FlattenObservations in the env-to-module pipeline)."
            )
        # Extract the available actions tensor from the observation.
        action_mask = torch.as_tensor(obs["action_mask"]).to(torch.float32)
        # Modify the batch: pass only `"obs"` into the networks.
        out = dict(batch)
        out[Columns.OBS] = obs["observations"]
        return action_mask, out

    @staticmethod
    def _mask_action_logits(batch: dict[str, Any], action_mask: torch.Tensor) -> dict[str, Any]:
        # Convert action mask into an `[0.0][-inf]`-type mask.
        inf_mask = torch.clamp(torch.log(action_mask), min=FLOAT_MIN)
        # Mask the logits.
        batch[Columns.ACTION_DIST_INPUTS] = batch[Columns.ACTION_DIST_INPUTS] + inf_mask
        # Return the batch with the masked action logits.
        return batch

"""TorchCategorical and TorchDiagGaussian: actions from ``action_dist_inputs``, sampled with a given RNG.

RLlib's env runner turns a module's ``action_dist_inputs`` into actions with the
module's action distribution class (``get_exploration_action_dist_cls()``:
``TorchCategorical`` over logits for a ``Discrete`` space, ``TorchDiagGaussian``
over the mean and log standard deviation, concatenated, for a ``Box``). cairn
does the same, but every draw takes the ``torch.Generator`` the env runner owns
and checkpoints, so a restored run samples the same actions (RLlib draws from
torch's global RNG).
"""

from __future__ import annotations

import abc
import math
from typing import Any

import gymnasium as gym
import torch

__all__ = ["TorchCategorical", "TorchDiagGaussian", "TorchDistribution", "action_dist_class_for"]

_LOG_2PI = math.log(2.0 * math.pi)


class TorchDistribution(abc.ABC):
    """A batch of action distributions (RLlib's ``TorchDistribution``): sample, logp, entropy."""

    @classmethod
    @abc.abstractmethod
    def from_logits(cls, logits: torch.Tensor) -> TorchDistribution:
        """The distributions whose parameters are ``logits`` (``Tensor[B, n]``, a module's ``action_dist_inputs``)."""

    @abc.abstractmethod
    def sample(self, *, generator: torch.Generator | None = None) -> torch.Tensor:
        """One action per row, drawn with ``generator`` (``None``: torch's global RNG)."""

    @abc.abstractmethod
    def logp(self, value: torch.Tensor) -> torch.Tensor:
        """The log-probability (density) of each row's action ``Tensor[B]``."""

    @abc.abstractmethod
    def entropy(self) -> torch.Tensor:
        """The entropy of each row's distribution ``Tensor[B]``."""

    @abc.abstractmethod
    def deterministic_sample(self) -> torch.Tensor:
        """The greedy action of each row: the most likely one (Categorical) or the mean (Gaussian)."""


class TorchCategorical(TorchDistribution):
    """Categorical distributions over the last dimension of ``logits`` (unnormalised log-probabilities)."""

    def __init__(self, logits: torch.Tensor) -> None:
        self.logits = logits
        self.log_probs = torch.log_softmax(logits, dim=-1)

    @classmethod
    def from_logits(cls, logits: torch.Tensor) -> TorchCategorical:
        """The distributions of ``logits`` ``Tensor[B, n]``."""
        return cls(logits)

    def sample(self, *, generator: torch.Generator | None = None) -> torch.Tensor:
        """Indices ``Tensor[B]`` (int64)."""
        probs = self.log_probs.detach().exp().reshape(-1, self.log_probs.shape[-1])
        drawn = torch.multinomial(probs, 1, generator=generator).squeeze(-1)
        return drawn.reshape(self.log_probs.shape[:-1])

    def logp(self, value: torch.Tensor) -> torch.Tensor:
        """Log-probability of each index in ``value`` ``Tensor[B]``."""
        return self.log_probs.gather(-1, value.long().unsqueeze(-1)).squeeze(-1)

    def entropy(self) -> torch.Tensor:
        """``-sum(p log p)`` per row."""
        return -(self.log_probs.exp() * self.log_probs).sum(-1)

    def deterministic_sample(self) -> torch.Tensor:
        """The most likely index of each row."""
        return self.logits.argmax(-1)


class TorchDiagGaussian(TorchDistribution):
    """Gaussians with diagonal covariance: ``logits`` is the mean and the log standard deviation, concatenated.

    Args:
        loc: Means ``Tensor[B, d]``.
        log_std: Log standard deviations ``Tensor[B, d]``.
    """

    def __init__(self, loc: torch.Tensor, log_std: torch.Tensor) -> None:
        self.loc = loc
        self.log_std = log_std

    @classmethod
    def from_logits(cls, logits: torch.Tensor) -> TorchDiagGaussian:
        """Split ``logits`` ``Tensor[B, 2d]`` into mean and log standard deviation (RLlib's layout).

        Raises:
            ValueError: The last dimension is odd.
        """
        if logits.shape[-1] % 2:
            raise ValueError(
                f"TorchDiagGaussian takes action_dist_inputs of the mean and the log standard deviation concatenated "
                f"(an even last dimension, 2 x the action size), got shape {tuple(logits.shape)}."
            )
        loc, log_std = torch.chunk(logits, 2, dim=-1)
        return cls(loc, log_std)

    def sample(self, *, generator: torch.Generator | None = None) -> torch.Tensor:
        """``loc + std * N(0, 1)``, ``Tensor[B, d]``."""
        noise = torch.randn(self.loc.shape, generator=generator, dtype=self.loc.dtype)
        return (self.loc + self.log_std.exp() * noise).detach()

    def logp(self, value: torch.Tensor) -> torch.Tensor:
        """Log-density of each row ``Tensor[B]`` (summed over the action dimensions)."""
        z = (value - self.loc) / self.log_std.exp()
        return (-0.5 * z.pow(2) - self.log_std - 0.5 * _LOG_2PI).sum(-1)

    def entropy(self) -> torch.Tensor:
        """Entropy of each row ``Tensor[B]``."""
        return (0.5 + 0.5 * _LOG_2PI + self.log_std).sum(-1)

    def deterministic_sample(self) -> torch.Tensor:
        """The mean."""
        return self.loc


def action_dist_class_for(action_space: gym.Space[Any]) -> type[TorchDistribution]:
    """The distribution RLlib's default catalog picks for ``action_space``.

    Raises:
        ValueError: A space other than ``Discrete`` or a one-dimensional ``Box``; the
            module then samples its actions itself (returns ``"actions"``).
    """
    if isinstance(action_space, gym.spaces.Discrete):
        return TorchCategorical
    if isinstance(action_space, gym.spaces.Box) and len(action_space.shape) == 1:
        return TorchDiagGaussian
    raise ValueError(
        f"No action distribution for {action_space!r}: cairn samples from action_dist_inputs for Discrete "
        "(TorchCategorical) and one-dimensional Box (TorchDiagGaussian) spaces. Return 'actions' (and "
        "'action_logp') from the module's forward passes, or override get_exploration_action_dist_cls()."
    )
